"""What a healthy instance of the service must carry to be a Hive node."""

from __future__ import annotations

from typing import Any

import pytest

from hive_ext_consul import RECORD_VERSION, MalformedInstance, instance_from
from hive_ext_consul._agent import Instance


def entry(**service: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {"ID": "hive-n1", "Address": "10.0.0.5", "Port": 7800,
                              "Meta": {"hive-node-id": "n1", "hive-record-version": "1"}}
    fields.update(service)
    return {"Node": {"Address": "10.9.9.9"}, "Service": fields}


def test_a_hive_instance() -> None:
    assert RECORD_VERSION == "1"
    assert instance_from(entry()) == Instance("hive-n1", "n1", "10.0.0.5", 7800)


def test_without_a_service_address_the_agents_node_address_is_used() -> None:
    assert instance_from(entry(Address="")).host == "10.9.9.9"


@pytest.mark.parametrize(("raw", "why"), [
    ("text", "not a service entry"),
    ({"Service": None}, "not a service entry"),
    (entry(ID=None), "no ID or Meta"),
    (entry(Meta={}), "hive-record-version is None"),
    (entry(Meta={"hive-record-version": "2", "hive-node-id": "n1"}), "hive-record-version is '2'"),
    (entry(Meta={"hive-record-version": "1"}), "no hive-node-id"),
    ({"Node": {}, "Service": entry(Address="")["Service"]}, "no address"),
    (entry(Port=0), "port 0 is not a TCP port"),
    (entry(Port="7800"), "port '7800' is not a TCP port"),
    (entry(Port=True), "port True is not a TCP port"),
])
def test_what_is_not_a_hive_node_is_refused_with_the_reason(raw: Any, why: str) -> None:
    with pytest.raises(MalformedInstance, match=why):
        instance_from(raw)
