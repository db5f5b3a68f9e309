"""file-auth on a real node: paho clients log in, publish and subscribe under the permissions."""

from __future__ import annotations

import logging
import subprocess
import sysconfig
import tomllib
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from hive_ext_api import ExtensionContext, ExtensionRefused

import hive_ext_file_auth
from hive_ext_file_auth._passwords import verify_password

BAD_USER_NAME_OR_PASSWORD = 0x86
NOT_AUTHORIZED = 0x87


@pytest.mark.parametrize("protocol", [mqtt.MQTTv5, mqtt.MQTTv311])
def test_known_user_with_right_password_connects(hive_node: Any, mqtt_client: Any,
                                                 passwords: dict[str, str], protocol: int) -> None:
    code = mqtt_client(hive_node, protocol=protocol).connect("sensor-1", passwords["sensor-1"])
    assert not code.is_failure, code


def test_wrong_password_is_refused(hive_node: Any, mqtt_client: Any) -> None:
    code = mqtt_client(hive_node).connect("sensor-1", "not-the-password")
    assert code.value == BAD_USER_NAME_OR_PASSWORD


def test_unknown_user_and_anonymous_are_refused(hive_node: Any, mqtt_client: Any) -> None:
    assert mqtt_client(hive_node).connect("mallory", "whatever").is_failure
    assert mqtt_client(hive_node).connect().is_failure


def test_publish_only_where_allowed(hive_node: Any, mqtt_client: Any,
                                    passwords: dict[str, str]) -> None:
    dashboard = mqtt_client(hive_node)
    assert not dashboard.connect("dashboard", passwords["dashboard"]).is_failure
    assert dashboard.subscribe("sensors/#").value == 1
    sensor = mqtt_client(hive_node)
    assert not sensor.connect("sensor-1", passwords["sensor-1"]).is_failure

    assert sensor.publish("sensors/sensor-2/temperature", b"21.0").value == NOT_AUTHORIZED
    assert not sensor.publish("sensors/sensor-1/temperature", b"22.5").is_failure

    message = dashboard.receive()
    assert (message.topic, message.payload) == ("sensors/sensor-1/temperature", b"22.5")
    assert dashboard.nothing_received()


def test_subscribe_only_where_allowed(hive_node: Any, mqtt_client: Any,
                                      passwords: dict[str, str]) -> None:
    sensor = mqtt_client(hive_node, client_id="sensor-1-a")
    assert not sensor.connect("sensor-1", passwords["sensor-1"]).is_failure
    assert sensor.subscribe("commands/sensor-1-a/#").value == 1
    assert sensor.subscribe("commands/sensor-1-b/#").value == NOT_AUTHORIZED
    assert sensor.subscribe("sensors/#").value == NOT_AUTHORIZED

    dashboard = mqtt_client(hive_node)
    assert not dashboard.connect("dashboard", passwords["dashboard"]).is_failure
    assert dashboard.subscribe("sensors/+/temperature").value == 1
    assert dashboard.subscribe("$share/screens/sensors/#").value == 1
    assert dashboard.subscribe("#").value == NOT_AUTHORIZED


def _record(node: Any, module: Any) -> Any:
    for record in node.extensions.manager.records:
        if record.module is module or record.name in ("file-auth", module.__name__):
            return record
    raise AssertionError(f"{module.__name__} is not among {node.extensions.manager.records}")


def test_refuses_to_start_without_users_file(hive_node_factory: Any, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "nowhere" / "users.toml"
    monkeypatch.setenv(hive_ext_file_auth.USERS_ENV, str(missing))
    node = hive_node_factory(extensions=[hive_ext_file_auth])
    record = _record(node, hive_ext_file_auth)
    assert not record.active
    assert str(missing) in record.reason and "does not exist" in record.reason


@pytest.mark.parametrize(("content", "complaint"), [
    ("[users.a\nsalt=", "not valid TOML"),
    ("[users.a]\nsalt = \"!!\"\nhash = \"AAAA\"\n", "salt is not valid base64"),
    ("[users.a]\nsalt = \"AAAA\"\n", "hash is missing"),
    ("[users.a]\nsalt = \"AAAA\"\nhash = \"AAAA\"\npublish = [\"a/#/b\"]\n", "invalid topic"),
    ("[users.a]\nsalt = \"AAAA\"\nhash = \"AAAA\"\npubish = []\n", "unknown keys"),
    ("title = \"no users\"\n", "no [users.<name>] tables"),
])
def test_refuses_to_start_with_invalid_users_file(hive_node_factory: Any, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  content: str, complaint: str) -> None:
    users = tmp_path / "users.toml"
    users.write_text(content)
    monkeypatch.setenv(hive_ext_file_auth.USERS_ENV, str(users))
    node = hive_node_factory(extensions=[hive_ext_file_auth])
    record = _record(node, hive_ext_file_auth)
    assert not record.active
    assert complaint in record.reason


def test_default_users_file_is_in_the_data_dir(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(hive_ext_file_auth.USERS_ENV, raising=False)
    context = ExtensionContext(name="file-auth", data_dir=tmp_path,
                               services=None,  # type: ignore[arg-type]
                               log=logging.getLogger("test"))
    with pytest.raises(ExtensionRefused, match=r"users\.toml does not exist"):
        hive_ext_file_auth.hive_extension_start(context)
    (tmp_path / "users.toml").write_text(
        subprocess.run([_script("hive-file-auth-hash"), "someone", "--password-stdin"],
                       input="pw\n", capture_output=True, text=True, check=True).stdout)
    hive_ext_file_auth.hive_extension_start(context)
    hive_ext_file_auth.hive_extension_stop()


def _script(name: str) -> str:
    return str(Path(sysconfig.get_path("scripts")) / name)


def test_hash_cli_makes_a_users_file_entry(tmp_path: Path) -> None:
    result = subprocess.run(
        [_script("hive-file-auth-hash"), "sensor-9", "--password-stdin",
         "--publish", "sensors/sensor-9/#", "--subscribe", "commands/sensor-9/#"],
        input="correct horse\n", capture_output=True, text=True, check=True)
    table = tomllib.loads(result.stdout)["users"]["sensor-9"]
    assert table["publish"] == ["sensors/sensor-9/#"]
    assert table["subscribe"] == ["commands/sensor-9/#"]
    (tmp_path / "users.toml").write_text(result.stdout)
    users = hive_ext_file_auth.load_users(tmp_path / "users.toml")
    user = users["sensor-9"]
    assert verify_password(b"correct horse", user.salt, user.password_hash)
    assert not verify_password(b"wrong horse", user.salt, user.password_hash)


def test_hash_cli_refuses_bad_filters() -> None:
    result = subprocess.run([_script("hive-file-auth-hash"), "x", "--password-stdin",
                             "--publish", "a/#/b"], input="pw\n", capture_output=True, text=True)
    assert result.returncode == 2 and "a/#/b" in result.stderr



def test_installed_under_the_extensions_entry_point() -> None:
    from importlib.metadata import entry_points

    (entry_point,) = entry_points(group="hive.extensions", name="file-auth")
    assert entry_point.load() is hive_ext_file_auth
