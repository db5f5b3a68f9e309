"""Password hashes and tokens for the REST API: made by `hive rest-api`, read by the config."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hive_core.admin import hash_password, new_token, verify_password
from hive_core.config import ConfigError, PasswordHash, parse_config

pytestmark = pytest.mark.timeout(60)

SALT = "AAAAAAAAAAAAAAAAAAAAAA"  # 16 zero bytes, base64 without padding
DIGEST = "A" * 43  # 32 zero bytes


def hive_cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hive_core.cli", *args], input=stdin,
                          capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("algorithm", ["scrypt", "pbkdf2-sha256"])
def test_a_hash_verifies_its_password_only(algorithm: str) -> None:
    hashed = hash_password("correct horse", algorithm)
    assert hashed.algorithm == algorithm
    assert verify_password(b"correct horse", hashed)
    assert not verify_password(b"correct hors", hashed)
    assert not verify_password(b"", hashed)
    again = PasswordHash.parse(str(hashed))
    assert again == hashed and verify_password(b"correct horse", again)
    assert hash_password("correct horse", algorithm).salt != hashed.salt  # a fresh salt each


def test_the_hash_string_is_phc_shaped() -> None:
    text = str(hash_password("x"))
    assert text.startswith("$scrypt$ln=15,r=8,p=1$")
    assert "=" not in text.split("$")[-1]  # base64 without padding
    assert str(hash_password("x", "pbkdf2-sha256")).startswith("$pbkdf2-sha256$i=600000$")


@pytest.mark.parametrize(("text", "problem"), [
    ("s3cret", "not a password hash"),
    (f"$md5$i=1${SALT}${DIGEST}", "unknown password hash algorithm 'md5'"),
    (f"$scrypt$ln=10,r=8,p=1${SALT}${DIGEST}", "scrypt cost ln=10 is outside 14 to 20"),
    (f"$scrypt$ln=20,r=32,p=1${SALT}${DIGEST}", "needs more than 256 MiB per check"),
    (f"$scrypt$ln=15,r=8${SALT}${DIGEST}", "takes the parameters ln, r and p"),
    (f"$pbkdf2-sha256$i=1000${SALT}${DIGEST}", "i=1000 iterations is outside"),
    (f"$pbkdf2-sha256$i=600000$AAAA${DIGEST}", "a salt of at least 8 bytes"),
    (f"$pbkdf2-sha256$i=600000${SALT}$A", "not base64"),
])
def test_a_bad_hash_is_refused_saying_why(text: str, problem: str) -> None:
    with pytest.raises(ValueError) as refused:
        PasswordHash.parse(text)
    assert problem in str(refused.value)


def test_hash_password_reads_stdin_and_its_output_is_accepted_by_the_config() -> None:
    done = hive_cli("rest-api", "hash-password", "--password-stdin", stdin="pa:ss wörd\n")
    assert done.returncode == 0, done.stderr
    line = done.stdout.strip()
    assert verify_password("pa:ss wörd".encode(), PasswordHash.parse(line))
    config = parse_config("<hivemq><rest-api><auth><enabled>true</enabled><users><user>"
                          f"<name>ops</name><password-hash>{line}</password-hash></user>"
                          "</users></auth></rest-api></hivemq>")
    assert config.rest_api.auth.users[0].password_hash == line


def test_hash_password_refuses_an_empty_password() -> None:
    done = hive_cli("rest-api", "hash-password", "--password-stdin", stdin="\n")
    assert done.returncode == 2 and "the password is empty" in done.stderr


def test_new_token_prints_a_token_the_config_accepts() -> None:
    done = hive_cli("rest-api", "new-token")
    assert done.returncode == 0, done.stderr
    token = done.stdout.strip()
    assert len(token) == 43 and token != new_token()
    config = parse_config("<hivemq><rest-api><auth><enabled>true</enabled><tokens>"
                          f"<token>{token}</token></tokens></auth></rest-api></hivemq>")
    assert config.rest_api.auth.tokens == (token,)


def test_a_plain_password_element_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"unknown element <password> in <user>; expected one "
                                          r"of: name, password-hash"):
        parse_config("<hivemq><rest-api><auth><enabled>true</enabled><users><user><name>ops"
                     "</name><password>s3cret</password></user></users></auth></rest-api>"
                     "</hivemq>")
