"""How the facade walks a hook's chain: first answer, None asks the next, async, failures."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

import pytest

from hive_core.plugins import ExtensionManager, Extensions
from hive_ext_api import (
    AuthDecision,
    ClientInfo,
    ConnectInfo,
    PublishMessage,
    ReasonCode,
    SubscriptionInfo,
    hookimpl,
)

CLIENT = ClientInfo("c1", 5, "alice")


def facade(*plugins: object, deadline: float = 5.0) -> Extensions:
    manager = ExtensionManager(builtins=(), discover_installed=False)
    for index, plugin in enumerate(plugins):
        manager.register(f"p{index}", plugin)
    return Extensions(manager, deadline=deadline)


def run(awaitable: Awaitable[Any]) -> Any:
    async def main() -> Any:
        return await asyncio.wait_for(awaitable, 10)
    return asyncio.run(main())


def connect_info(username: str = "alice") -> ConnectInfo:
    return ConnectInfo(ClientInfo("c1", 5, username), b"pw")


class Answer:
    """An authenticator that records being asked and answers ``answer``."""

    def __init__(self, answer: Any, calls: list[str], label: str) -> None:
        self.answer, self.calls, self.label = answer, calls, label

    @hookimpl
    def hive_authenticate(self, connect: ConnectInfo) -> Any:
        self.calls.append(self.label)
        return self.answer


class AsyncAnswer(Answer):
    @hookimpl
    async def hive_authenticate(self, connect: ConnectInfo) -> Any:
        await asyncio.sleep(0.01)
        self.calls.append(self.label)
        return self.answer


class Raises:
    @hookimpl
    def hive_authenticate(self, connect: ConnectInfo) -> Any:
        raise RuntimeError("boom")


class AsyncRaises:
    @hookimpl
    async def hive_authenticate(self, connect: ConnectInfo) -> Any:
        raise RuntimeError("async boom")


class Slow:
    @hookimpl
    async def hive_authenticate(self, connect: ConnectInfo) -> Any:
        await asyncio.sleep(30)
        return AuthDecision.accept()


# pluggy calls the last registered first: facade(a, b) asks b, then a.


def test_first_answer_wins_and_later_ones_are_not_asked() -> None:
    calls: list[str] = []
    ext = facade(Answer(AuthDecision.refuse(), calls, "last"),
                 Answer(AuthDecision.accept(), calls, "first"))
    decision = run(ext.authenticate(connect_info()))
    assert decision.allow
    assert calls == ["first"]


def test_none_asks_the_next() -> None:
    calls: list[str] = []
    ext = facade(Answer(AuthDecision.refuse(ReasonCode.BANNED), calls, "second"),
                 Answer(None, calls, "first"))
    decision = run(ext.authenticate(connect_info()))
    assert not decision.allow and decision.reason_code == ReasonCode.BANNED
    assert calls == ["first", "second"]


def test_nobody_answers_refuses_when_authenticators_exist() -> None:
    calls: list[str] = []
    ext = facade(Answer(None, calls, "a"), Answer(None, calls, "b"))
    decision = run(ext.authenticate(connect_info()))
    assert not decision.allow and decision.reason_code == ReasonCode.NOT_AUTHORIZED
    assert calls == ["b", "a"]


def test_no_authenticator_accepts() -> None:
    assert run(facade().authenticate(connect_info())).allow


@pytest.mark.parametrize("kinds", [("sync", "async", "sync"), ("async", "sync", "async"),
                                   ("async", "async", "sync"), ("sync", "sync", "async")])
def test_sync_and_async_mixed(kinds: tuple[str, str, str]) -> None:
    calls: list[str] = []
    made = {"sync": Answer, "async": AsyncAnswer}
    # Asked in order: third (None), second (None), first (accept).
    ext = facade(made[kinds[0]](AuthDecision.accept(), calls, "first"),
                 made[kinds[1]](None, calls, "second"),
                 made[kinds[2]](None, calls, "third"))
    assert run(ext.authenticate(connect_info())).allow
    assert calls == ["third", "second", "first"]


def test_first_is_synchronous_when_every_impl_is() -> None:
    calls: list[str] = []
    ext = facade(Answer(True, calls, "b"), Answer(None, calls, "a"))
    assert ext.first("hive_authenticate", connect=connect_info()) is True


@pytest.mark.parametrize("broken", [Raises, AsyncRaises])
def test_an_impl_that_raises_is_logged_counted_and_skipped(
        broken: type, caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []
    ext = facade(Answer(AuthDecision.accept(), calls, "after"), broken())
    with caplog.at_level(logging.ERROR, logger="hive.extensions"):
        assert run(ext.authenticate(connect_info())).allow
    assert calls == ["after"]
    assert ext.failures["p1"] == 1
    assert "p1" in caplog.text and "hive_authenticate" in caplog.text


def test_a_slow_async_impl_hits_the_deadline_and_falls_back(
        caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []
    ext = facade(Answer(AuthDecision.refuse(), calls, "fallback"), Slow(), deadline=0.2)
    with caplog.at_level(logging.ERROR, logger="hive.extensions"):
        decision = run(ext.authenticate(connect_info()))
    assert not decision.allow
    assert calls == ["fallback"]
    assert ext.failures["p1"] == 1
    assert "longer than 0.2 s" in caplog.text


def test_tryfirst_and_trylast_are_respected() -> None:
    calls: list[str] = []

    class Early:
        @hookimpl(tryfirst=True)
        def hive_intercept_connect(self, connect: ConnectInfo) -> None:
            calls.append("tryfirst")

    class Late:
        @hookimpl(trylast=True)
        def hive_intercept_connect(self, connect: ConnectInfo) -> None:
            calls.append("trylast")

    class Plain:
        def __init__(self, label: str) -> None:
            self.label = label

        @hookimpl
        async def hive_intercept_connect(self, connect: ConnectInfo) -> None:
            calls.append(self.label)

    # Registered in the order least likely to give the right answer by accident.
    ext = facade(Early(), Plain("plain-1"), Late(), Plain("plain-2"))
    run(ext.intercept_connect(connect_info()))
    assert calls == ["tryfirst", "plain-2", "plain-1", "trylast"]


def test_each_goes_on_after_a_failure() -> None:
    seen: list[str] = []

    class Broken:
        @hookimpl
        def hive_intercept_subscribe(self, subscriptions: list[SubscriptionInfo]) -> None:
            raise ValueError("bad")

    class Raise:
        @hookimpl
        def hive_intercept_subscribe(self, client: ClientInfo,
                                     subscriptions: list[SubscriptionInfo]) -> None:
            seen.append(client.client_id)
            subscriptions[0].qos = 0

    ext = facade(Raise(), Broken())
    wanted = [SubscriptionInfo("a/b", 2)]
    run(ext.intercept_subscribe(CLIENT, wanted))
    assert seen == ["c1"] and wanted[0].qos == 0
    assert ext.failures == {"p1": 1}


def test_inbound_interceptors_stop_at_a_reason_code() -> None:
    asked: list[str] = []

    class Rewrite:
        @hookimpl
        async def hive_intercept_publish_inbound(self, publish: PublishMessage) -> None:
            asked.append("rewrite")
            publish.topic = "moved/" + publish.topic

    class Stop:
        @hookimpl
        def hive_intercept_publish_inbound(self, publish: PublishMessage) -> int:
            asked.append("stop")
            return ReasonCode.IMPLEMENTATION_SPECIFIC_ERROR

    message = PublishMessage("t", b"x")
    ext = facade(Stop(), Rewrite())
    assert run(ext.intercept_publish_inbound(CLIENT, message)) == 0x83
    assert asked == ["rewrite", "stop"] and message.topic == "moved/t"


def test_outbound_first_answer_decides() -> None:
    asked: list[str] = []

    class Skip:
        @hookimpl
        def hive_intercept_publish_outbound(self) -> bool:
            asked.append("skip")
            return False

    class Send:
        @hookimpl
        def hive_intercept_publish_outbound(self) -> bool:
            asked.append("send")
            return True

    # "send" is asked first and answers True: "skip" must not be asked.
    assert run(facade(Skip(), Send()).intercept_publish_outbound(CLIENT, PublishMessage("t", b"")))
    assert asked == ["send"]
    asked.clear()
    assert not run(facade(Send(), Skip()).intercept_publish_outbound(
        CLIENT, PublishMessage("t", b"")))
    assert asked == ["skip"]


def test_a_hook_without_implementation_costs_nothing() -> None:
    ext = facade()
    for flag in ("authenticates", "enhanced_auth", "authorizes_publish", "authorizes_subscribe",
                 "intercepts_connect", "intercepts_inbound", "intercepts_outbound",
                 "intercepts_subscribe", "intercepts_unsubscribe", "watches_clients",
                 "on_publish", "records_publishes", "any_client_hooks"):
        assert getattr(ext, flag) is False, flag
    assert Extensions.none().on_publish is False
    assert ext.routes_plainly and Extensions.none().routes_plainly


class PublishAuthorizer:
    """Implements one client hook: publish authorization."""

    @hookimpl
    def hive_authorize_publish(self) -> bool:
        return True


def test_flags_follow_what_is_implemented() -> None:
    ext = facade(PublishAuthorizer())
    assert ext.authorizes_publish and ext.on_publish and ext.any_client_hooks
    assert not ext.authenticates and not ext.intercepts_outbound and not ext.watches_clients


def test_deactivating_an_extension_clears_its_flags() -> None:
    ext = facade(PublishAuthorizer())
    ext.manager.deactivate("p0", "test")
    ext.refresh()
    assert not ext.authorizes_publish
    record = ext.manager.records[0]
    assert (record.active, record.reason) == (False, "test")
