"""hive_ext_api's settings-file reader (API 1.2): what a line may say, and every refusal."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hive_ext_api import (
    ExtensionRefused,
    Setting,
    SettingError,
    parse_properties,
    read_properties,
)

KNOWN = ("bucket-name", "bucket-region", "label")


def test_both_separators_comments_blanks_and_where_each_value_came_from() -> None:
    settings = parse_properties("""
        # a comment
        ! another
        bucket-name:hive-cluster
        bucket-region = eu-west-1
        label = a=b:c
        empty:
    """, "ext.properties")
    assert settings == {
        "bucket-name": Setting("hive-cluster", "ext.properties line 4"),
        "bucket-region": Setting("eu-west-1", "ext.properties line 5"),
        "label": Setting("a=b:c", "ext.properties line 6"),  # the first separator splits
        "empty": Setting("", "ext.properties line 7"),
    }


def test_environment_references_are_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIVE_TEST_SECRET", "s3cr3t")
    monkeypatch.setenv("HIVE_TEST_REGION", "eu")
    settings = parse_properties("bucket-name:${ENV:HIVE_TEST_SECRET}-${ENV:HIVE_TEST_REGION}\n",
                                "f")
    assert settings["bucket-name"].value == "s3cr3t-eu"


@pytest.mark.parametrize(("text", "message"), [
    ("bucket-name:abc\nnot a setting\n", "f line 2: 'not a setting' is not 'key:value'"),
    (":value\n", "f line 1: ':value' is not 'key:value'"),
    ("bucket-name:abc\n\nbucket-name:def\n", "f line 3: bucket-name is already set on line 1"),
    ("bucket-name:${ENV:HIVE_TEST_UNSET_VARIABLE}\n",
     "f line 1: bucket-name refers to ${ENV:HIVE_TEST_UNSET_VARIABLE}, but the environment has "
     "no HIVE_TEST_UNSET_VARIABLE"),
    ("bucket:abc\n", "f line 1: unknown setting bucket (did you mean bucket-name?)"),
    ("colour:red\n", "f line 1: unknown setting colour (known: bucket-name, bucket-region, "
                     "label)"),
])
def test_a_wrong_line_is_refused_naming_file_and_line(text: str, message: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HIVE_TEST_UNSET_VARIABLE", raising=False)
    with pytest.raises(SettingError, match=re.escape(message)):
        parse_properties(text, "f", KNOWN)


def test_without_known_keys_any_key_is_read() -> None:
    assert set(parse_properties("anything:1\nelse=2\n", "f")) == {"anything", "else"}


def test_a_setting_error_refuses_the_extension() -> None:
    # raised from hive_extension_start, the node logs the message and runs on without it
    assert issubclass(SettingError, ExtensionRefused)


def test_a_file_is_read_and_one_that_cannot_be_is_named(tmp_path: Path) -> None:
    path = tmp_path / "ext.properties"
    path.write_text("bucket-name: abc\n", encoding="utf-8")
    assert read_properties(path, KNOWN) == {
        "bucket-name": Setting("abc", f"{path} line 1")}
    with pytest.raises(SettingError, match=re.escape(f"cannot read {tmp_path / 'missing'}: "
                                                     "No such file or directory")):
        read_properties(tmp_path / "missing")
    (tmp_path / "latin1").write_bytes(b"bucket-name: caf\xe9\n")
    with pytest.raises(SettingError, match=f"cannot read {re.escape(str(tmp_path))}.*utf-8"):
        read_properties(tmp_path / "latin1")
