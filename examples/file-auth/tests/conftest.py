"""The users file and the node fixture's extension; ``mqtt_client`` comes with hive-broker."""

from __future__ import annotations

from typing import Any

import pytest

import hive_ext_file_auth
from hive_ext_file_auth._hash_cli import entry

PASSWORDS = {"sensor-1": "s3cret-1", "dashboard": "d4sh"}


@pytest.fixture
def passwords() -> dict[str, str]:
    return dict(PASSWORDS)


@pytest.fixture
def users_file(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A users file with a sensor and a dashboard, named by HIVE_FILE_AUTH_USERS."""
    path = tmp_path / "users.toml"
    path.write_text(
        entry("sensor-1", PASSWORDS["sensor-1"], ["sensors/{username}/#"],
              ["commands/{client_id}/#"])
        + entry("dashboard", PASSWORDS["dashboard"], [], ["sensors/#"]))
    monkeypatch.setenv(hive_ext_file_auth.USERS_ENV, str(path))
    return path


@pytest.fixture
def hive_extensions(users_file: Any) -> list[Any]:
    return [hive_ext_file_auth]
