"""Authorization fails closed: an authorizer that raises or hangs refuses, it never lets through.

And the broker's own namespace stays closed: a will may not be published under ``$SYS/``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from e2e.rawclient import RawClient

from hive_core.mqtt import PubAck, Publish, Will
from hive_ext_api import ClientInfo, hookimpl

pytestmark = pytest.mark.timeout(60)


class RaisingAuthorizer:
    @hookimpl
    def hive_authorize_publish(self, client: ClientInfo, topic: str) -> bool:
        raise RuntimeError("the ACL backend is down")

    @hookimpl
    def hive_authorize_subscribe(self, client: ClientInfo, topic_filter: str) -> bool:
        raise RuntimeError("the ACL backend is down")


class AsyncRaisingAuthorizer:
    @hookimpl
    async def hive_authorize_publish(self, client: ClientInfo, topic: str) -> bool:
        await asyncio.sleep(0)
        raise RuntimeError("the ACL backend is down")

    @hookimpl
    async def hive_authorize_subscribe(self, client: ClientInfo, topic_filter: str) -> bool:
        await asyncio.sleep(0)
        raise RuntimeError("the ACL backend is down")


@pytest.fixture(params=[RaisingAuthorizer, AsyncRaisingAuthorizer], ids=["sync", "async"])
def hive_extensions(request: pytest.FixtureRequest) -> list[Any]:
    return [request.param()]


def test_a_failing_authorizer_refuses_subscribe_and_publish(hive_node: Any) -> None:
    with RawClient(hive_node.port) as watcher, RawClient(hive_node.port) as publisher:
        watcher.connect(5, "watcher")
        assert watcher.subscribe("acl/#", 1).reason_codes == [0x87]
        publisher.connect(5, "publisher")
        publisher.publish("acl/x", b"secret", qos=1)
        assert publisher.expect(PubAck).reason_code == 0x87
        watcher.expect_nothing(0.5)
    refused = hive_node.call(lambda: dict(hive_node.extensions.refused_on_failure))
    assert refused == {"hive_authorize_subscribe": 1, "hive_authorize_publish": 1}


@pytest.mark.parametrize("hive_extensions", [[]], ids=["none"])
def test_a_will_under_sys_is_refused(hive_node: Any) -> None:
    with RawClient(hive_node.port) as watcher, RawClient(hive_node.port) as client:
        watcher.connect(5, "watcher")
        watcher.subscribe("$SYS/#", 1)
        ack = client.connect(5, "forger", will=Will("$SYS/broker/uptime", b"forged",
                                                     retain=True))
        assert ack.reason_code == 0x87
        client.expect_closed()
        watcher.expect_nothing(0.5)
    with RawClient(hive_node.port) as late:
        late.connect(5, "late")
        late.subscribe("$SYS/#", 1)
        assert not isinstance(late.receive(0.5), Publish)  # nothing was retained there
