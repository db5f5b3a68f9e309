"""Extensions in a running node, seen by real clients (paho 3.1.1 and 5, and a raw client)."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from e2e._session_helpers import PahoClient
from e2e.rawclient import RawClient

from hive_core.mqtt import Auth, ConnAck, Connect, PacketDecoder, PropertyId, PubAck, SubAck
from hive_core.persistence import MemorySessionStore
from hive_ext_api import (
    AuthDecision,
    AuthExchange,
    AuthStep,
    ClientInfo,
    ConnectInfo,
    ExtensionContext,
    ExtensionRefused,
    PublishMessage,
    ReasonCode,
    SubscriptionInfo,
    hookimpl,
)

pytestmark = pytest.mark.timeout(60)
P = PropertyId
WAIT = 5.0


def eventually(check: Callable[[], Any], timeout: float = 2 * WAIT) -> Any:
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout} s: {check}")
        time.sleep(0.02)


class Clients:
    """Paho clients that are closed at teardown whatever happened."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.made: list[PahoClient] = []

    def __call__(self, client_id: str, version: int = 5, username: str | None = None,
                 password: str | None = None, connect: bool = True,
                 expect_success: bool = True, **kwargs: Any) -> PahoClient:
        client = PahoClient(self.port, client_id, version=version, **kwargs)
        self.made.append(client)
        if username is not None:
            client.client.username_pw_set(username, password)
        if connect:
            client.connect(expect_success=expect_success)
        return client

    def subscriber_and_publisher(self, topic_filter: str, qos: int = 1,
                                 version: int = 5) -> tuple[PahoClient, PahoClient]:
        """``sub``, granted ``qos`` on ``topic_filter``, and ``pub``; both connected."""
        subscriber = self("sub", version=version)
        assert subscriber.subscribe(topic_filter, qos=qos) == [qos]
        return subscriber, self("pub", version=version)

    def close(self) -> None:
        for client in self.made:
            client.close()


def in_order(publisher: PahoClient, subscriber: PahoClient, topic: str, count: int) -> list[bytes]:
    """Publish b"0", b"1", ... to ``topic`` at QoS 1 without waiting for one acknowledgement
    before the next; return the payloads of the ``count`` messages ``subscriber`` gets."""
    infos = [publisher.client.publish(topic, str(i).encode(), qos=1) for i in range(count)]
    for info in infos:
        info.wait_for_publish(WAIT)
    return [subscriber.next_message().payload for _ in range(count)]


@pytest.fixture
def hive_extensions(request: pytest.FixtureRequest) -> list[Any]:
    """One of each of the test class's ``EXTENSIONS`` (classes), made anew for each test; a
    class whose extensions need fixtures of their own overrides this fixture instead."""
    return [make() for make in getattr(request.cls, "EXTENSIONS", ())]


@pytest.fixture
def clients(hive_node: Any) -> Any:
    made = Clients(hive_node.port)
    yield made
    made.close()


def raw(node: Any) -> RawClient:
    return RawClient(node.port, timeout=WAIT)


# ---------------------------------------------------------------------------- authentication


class PasswordCheck:
    """Knows alice (password "secret"); leaves everyone else to the next authenticator."""

    @hookimpl
    def hive_authenticate(self, connect: ConnectInfo) -> AuthDecision | None:
        if connect.username != "alice":
            return None
        if connect.password == b"secret":
            return AuthDecision.accept()
        return AuthDecision.refuse(ReasonCode.BAD_USER_NAME_OR_PASSWORD, "wrong password")


class TestAuthentication:
    EXTENSIONS = (PasswordCheck,)

    def test_v5_accept_and_refuse(self, clients: Clients) -> None:
        clients("ok", username="alice", password="secret")
        refused = clients("bad", username="alice", password="nope", expect_success=False)
        assert refused.reason_code == ReasonCode.BAD_USER_NAME_OR_PASSWORD
        assert refused.connack_props is not None
        assert refused.connack_props.ReasonString == "wrong password"

    def test_v5_no_authenticator_answers_refuses(self, clients: Clients) -> None:
        stranger = clients("who", username="mallory", password="x", expect_success=False)
        assert stranger.reason_code == ReasonCode.NOT_AUTHORIZED
        anonymous = clients("anon", expect_success=False)
        assert anonymous.reason_code == ReasonCode.NOT_AUTHORIZED

    def test_v311_return_codes(self, hive_node: Any, clients: Clients) -> None:
        clients("ok311", version=4, username="alice", password="secret")
        with raw(hive_node) as client:
            ack = client.connect(4, "bad311", username="alice", password=b"nope")
            assert ack.reason_code == 4  # bad user name or password
            client.expect_closed()
        with raw(hive_node) as client:
            ack = client.connect(4, "who311", username="mallory", password=b"x")
            assert ack.reason_code == 5  # not authorized
            client.expect_closed()


class Challenge:
    """A two-step method "CHALLENGE": the server asks for "proof-of-<nonce>"."""

    def __init__(self) -> None:
        self.steps: list[int] = []

    @hookimpl
    async def hive_enhanced_authenticate(self, exchange: AuthExchange) -> AuthStep | None:
        if exchange.method != "CHALLENGE":
            return None
        self.steps.append(exchange.step)
        if exchange.step == 0:
            exchange.state["nonce"] = "n42"
            return AuthStep.more(b"nonce=n42")
        if exchange.data == f"proof-of-{exchange.state['nonce']}".encode():
            return AuthStep.success(b"welcome")
        return AuthStep.failure(ReasonCode.NOT_AUTHORIZED, "bad proof")


class TestEnhancedAuthentication:
    @pytest.fixture
    def challenge(self) -> Challenge:
        return Challenge()

    @pytest.fixture
    def hive_extensions(self, challenge: Challenge) -> list[Any]:
        return [challenge]

    def test_two_step_exchange(self, hive_node: Any, challenge: Challenge) -> None:
        with raw(hive_node) as client:
            step, ack = _enhanced(client, "CHALLENGE", b"hello", reply=b"proof-of-n42")
            assert step.properties[P.AUTHENTICATION_METHOD] == "CHALLENGE"
            assert step.properties[P.AUTHENTICATION_DATA] == b"nonce=n42"
            assert ack.reason_code == 0
            assert ack.properties[P.AUTHENTICATION_METHOD] == "CHALLENGE"
            assert ack.properties[P.AUTHENTICATION_DATA] == b"welcome"
            assert client.subscribe("t/#", 1).reason_codes == [1]
        assert challenge.steps == [0, 1]

    def test_wrong_proof_is_refused(self, hive_node: Any) -> None:
        with raw(hive_node) as client:
            _, ack = _enhanced(client, "CHALLENGE", b"hello", reply=b"proof-of-guess")
            assert ack.reason_code == ReasonCode.NOT_AUTHORIZED
            assert ack.properties.get(P.REASON_STRING) == "bad proof"
            client.expect_closed()

    def test_unknown_method_is_refused(self, hive_node: Any) -> None:
        with raw(hive_node) as client:
            ack = client.connect(5, "enh2", AUTHENTICATION_METHOD="SCRAM-SHA-1")
            assert ack.reason_code == ReasonCode.BAD_AUTHENTICATION_METHOD
            client.expect_closed()


def _enhanced(client: RawClient, method: str, data: bytes, reply: bytes) -> tuple[Auth, ConnAck]:
    """CONNECT with ``method``, answer the server's AUTH with ``reply``: that AUTH, the CONNACK."""
    client.version = 5
    client.decoder = PacketDecoder(protocol_version=5, server=False)
    client.send(Connect("enh", 5, True, 60, None, None, None,
                        {P.AUTHENTICATION_METHOD: method, P.AUTHENTICATION_DATA: data}))
    step = client.expect(Auth)
    assert step.reason_code == 0x18  # continue authentication
    client.send(Auth(0x18, {P.AUTHENTICATION_METHOD: method, P.AUTHENTICATION_DATA: reply}))
    return step, client.expect(ConnAck)


# ---------------------------------------------------------------------------- authorization


class Authorizer:
    """Nobody publishes under secret/ and nobody subscribes to private/."""

    @hookimpl
    def hive_authorize_publish(self, topic: str) -> bool | None:
        return False if topic.startswith("secret/") else None

    @hookimpl
    async def hive_authorize_subscribe(self, topic_filter: str) -> bool | None:
        await asyncio.sleep(0)
        return False if topic_filter.startswith("private/") else None


class TestAuthorization:
    EXTENSIONS = (Authorizer,)

    def test_refused_publish_gets_puback_0x87_and_is_not_delivered(
            self, hive_node: Any, clients: Clients) -> None:
        listener = clients("listener")
        listener.subscribe("#", qos=1)
        with raw(hive_node) as publisher:
            publisher.connect(5, "pub")
            pid = publisher.publish("secret/plans", b"x", qos=1)
            ack = publisher.expect(PubAck)
            assert (ack.packet_id, ack.reason_code) == (pid, ReasonCode.NOT_AUTHORIZED)
            publisher.publish("public/news", b"y", qos=1)
            assert publisher.expect(PubAck).reason_code == 0
        message = listener.next_message()
        assert message.topic == "public/news"
        listener.no_message(0.3)

    def test_a_refused_publish_is_logged_at_debug(
            self, hive_node: Any, caplog: pytest.LogCaptureFixture) -> None:
        with caplog.at_level("DEBUG", logger="hive.connection"), raw(hive_node) as publisher:
            publisher.connect(5, "logged-pub")
            publisher.publish("secret/plans", b"x", qos=1)
            assert publisher.expect(PubAck).reason_code == ReasonCode.NOT_AUTHORIZED
            publisher.publish("secret/qos0", b"x", qos=0)
            publisher.publish("$SYS/fake", b"x", qos=1)
            assert publisher.expect(PubAck).reason_code == ReasonCode.NOT_AUTHORIZED
            publisher.publish("public/sync", b"x", qos=1)  # everything before is handled
            assert publisher.expect(PubAck).reason_code in (0, 0x10)  # 0x10: no subscriber
        said = [(r.levelname, r.getMessage()) for r in caplog.records
                if "logged-pub" in r.getMessage() and "refused" in r.getMessage()]
        assert said == [
            ("DEBUG", "publish of 'logged-pub' to 'secret/plans' refused: not authorized "
                      "by an extension (0x87)"),
            ("DEBUG", "publish of 'logged-pub' to 'secret/qos0' refused: not authorized "
                      "by an extension (0x87)"),
            ("DEBUG", "publish of 'logged-pub' to '$SYS/fake' refused: clients may not "
                      "publish under $SYS/ (0x87)")], said

    def test_refused_subscription_gets_suback_0x87(self, hive_node: Any,
                                                    clients: Clients) -> None:
        client = clients("sub5")
        assert client.subscribe("private/x", qos=1) == [ReasonCode.NOT_AUTHORIZED]
        assert client.subscribe("open/x", qos=1) == [1]
        with raw(hive_node) as v3:
            v3.connect(4, "sub311")
            assert v3.subscribe("private/y", 1).reason_codes == [0x80]

    def test_mixed_subscribe_keeps_order(self, hive_node: Any) -> None:
        from hive_core.mqtt import Subscribe, SubscriptionRequest

        with raw(hive_node) as client:
            client.connect(5, "mixed")
            client.send(Subscribe(7, [SubscriptionRequest("a", 1),
                                      SubscriptionRequest("private/b", 1),
                                      SubscriptionRequest("c", 0)]))
            assert client.expect(SubAck).reason_codes == [1, 0x87, 0]


# ---------------------------------------------------------------------------- interceptors


class InboundRewrite:
    """Moves in/... to moved/... with a user property; stops stop/... with 0x83."""

    @hookimpl
    def hive_intercept_publish_inbound(self, client: ClientInfo,
                                       publish: PublishMessage) -> int | None:
        if publish.topic.startswith("stop/"):
            return ReasonCode.IMPLEMENTATION_SPECIFIC_ERROR
        if publish.topic.startswith("in/"):
            publish.topic = "moved/" + publish.topic[3:]
            publish.user_properties.append(("seen-by", client.client_id))
        return None


class TestInboundInterceptor:
    EXTENSIONS = (InboundRewrite,)

    def test_rewrites_topic_and_user_properties(self, clients: Clients) -> None:
        subscriber, publisher = clients.subscriber_and_publisher("moved/#")
        publisher.publish("in/a", b"hello", qos=1)
        message = subscriber.next_message()
        assert (message.topic, message.payload) == ("moved/a", b"hello")
        assert ("seen-by", "pub") in message.properties.UserProperty

    def test_reason_code_stops_the_message(self, hive_node: Any, clients: Clients) -> None:
        subscriber = clients("sub")
        subscriber.subscribe("#", qos=1)
        with raw(hive_node) as publisher:
            publisher.connect(5, "pub")
            publisher.publish("stop/x", b"x", qos=1)
            assert publisher.expect(PubAck).reason_code == 0x83
            publisher.publish("stop/x", b"x", qos=0)
            publisher.publish("ok/x", b"y", qos=1)
            assert publisher.expect(PubAck).reason_code == 0
        assert subscriber.next_message().topic == "ok/x"
        subscriber.no_message(0.3)


class SlowInbound:
    """An async interceptor that answers after a random short wait."""

    @hookimpl
    async def hive_intercept_publish_inbound(self, publish: PublishMessage) -> None:
        await asyncio.sleep(random.uniform(0, 0.01))
        publish.user_properties.append(("checked", "yes"))


class TestAsyncInboundInterceptor:
    EXTENSIONS = (SlowInbound,)

    @pytest.mark.parametrize("version", [4, 5])
    def test_keeps_message_order(self, clients: Clients, version: int) -> None:
        subscriber, publisher = clients.subscriber_and_publisher("seq", version=version)
        received = in_order(publisher, subscriber, "seq", 50)
        assert received == [str(i).encode() for i in range(50)]
        subscriber.no_message(0.2)


class OutboundPerSubscriber:
    @hookimpl
    def hive_intercept_publish_outbound(self, client: ClientInfo,
                                        publish: PublishMessage) -> bool | None:
        if client.client_id == "skip-me":
            return False
        if client.client_id == "rewrite-me":
            publish.payload = b"rewritten for " + client.client_id.encode()
        return None


class TestOutboundInterceptor:
    EXTENSIONS = (OutboundPerSubscriber,)

    @pytest.mark.parametrize("qos", [0, 1])
    def test_skips_one_and_rewrites_another(self, clients: Clients, qos: int) -> None:
        skipped = clients("skip-me")
        rewritten = clients("rewrite-me", version=4)
        plain = clients("plain")
        for client in (skipped, rewritten, plain):
            client.subscribe("news", qos=qos)
        clients("pub").publish("news", b"original", qos=qos)
        assert rewritten.next_message().payload == b"rewritten for rewrite-me"
        assert plain.next_message().payload == b"original"
        skipped.no_message(0.3)


class SubscribeDowngrade:
    @hookimpl
    def hive_intercept_subscribe(self, subscriptions: list[SubscriptionInfo]) -> None:
        for subscription in subscriptions:
            subscription.qos = min(subscription.qos, 1)


class TestSubscribeInterceptor:
    EXTENSIONS = (SubscribeDowngrade,)

    def test_changes_the_qos(self, hive_node: Any, clients: Clients) -> None:
        client = clients("sub")
        assert client.subscribe("t", qos=2) == [1]
        subscriptions = hive_node.call(hive_node.services.subscriptions, "sub")
        assert [(s.topic_filter, s.qos) for s in subscriptions] == [("t", 1)]


class ConnectChanges:
    def __init__(self) -> None:
        self.seen: list[list[tuple[str, str]]] = []

    @hookimpl(tryfirst=True)
    def hive_intercept_connect(self, connect: ConnectInfo) -> None:
        connect.keep_alive = 30
        connect.user_properties.append(("tenant", "blue"))


class ConnectWatcher:
    def __init__(self) -> None:
        self.seen: list[tuple[int, list[tuple[str, str]]]] = []

    @hookimpl
    async def hive_intercept_connect(self, connect: ConnectInfo) -> None:
        self.seen.append((connect.keep_alive, list(connect.user_properties)))


class TestConnectInterceptor:
    @pytest.fixture
    def watcher(self) -> ConnectWatcher:
        return ConnectWatcher()

    @pytest.fixture
    def hive_extensions(self, watcher: ConnectWatcher) -> list[Any]:
        return [ConnectChanges(), watcher]

    def test_changes_keep_alive_and_user_properties(self, hive_node: Any, clients: Clients,
                                                     watcher: ConnectWatcher) -> None:
        client = clients("ka", keepalive=60)
        assert watcher.seen == [(30, [("tenant", "blue")])]

        def keep_alive() -> int:
            return next(c.keep_alive for c in hive_node.node.broker.connections
                        if c.client_id == "ka")

        assert hive_node.call(keep_alive) == 30
        # MQTT 5 clients are told the keep alive the server uses.
        assert client.connack_props is not None
        assert client.connack_props.ServerKeepAlive == 30


# ---------------------------------------------------------------------------- client events


class ClientEvents:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, Any]] = []
        self.lock = threading.Lock()

    def add(self, *event: Any) -> None:
        with self.lock:
            self.events.append(event)

    def of(self, client_id: str) -> list[tuple[str, Any]]:
        with self.lock:
            return [(kind, value) for kind, cid, value in self.events if cid == client_id]

    @hookimpl
    def hive_client_connected(self, client: ClientInfo, session_present: bool) -> None:
        self.add("connected", client.client_id, session_present)

    @hookimpl
    async def hive_client_disconnected(self, client: ClientInfo, graceful: bool) -> None:
        self.add("disconnected", client.client_id, graceful)

    @hookimpl
    def hive_intercept_disconnect(self, client: ClientInfo, reason_code: int) -> None:
        self.add("disconnect-packet", client.client_id, reason_code)


class TestClientEvents:
    @pytest.fixture
    def watcher(self) -> ClientEvents:
        return ClientEvents()

    @pytest.fixture
    def hive_extensions(self, watcher: ClientEvents) -> list[Any]:
        return [watcher]

    @pytest.mark.parametrize("version", [4, 5])
    def test_graceful_disconnect(self, clients: Clients, watcher: ClientEvents,
                                 version: int) -> None:
        client = clients("polite", version=version)
        eventually(lambda: watcher.of("polite"))
        client.disconnect()
        eventually(lambda: len(watcher.of("polite")) == 3)
        assert watcher.of("polite") == [("connected", False), ("disconnect-packet", 0),
                                        ("disconnected", True)]

    def test_dropped_connection_is_not_graceful(self, hive_node: Any,
                                                watcher: ClientEvents) -> None:
        client = raw(hive_node)
        client.connect(5, "rude")
        client.close()  # no DISCONNECT
        eventually(lambda: len(watcher.of("rude")) == 2)
        assert watcher.of("rude") == [("connected", False), ("disconnected", False)]

    def test_disconnect_with_will_is_graceful(self, hive_node: Any,
                                              watcher: ClientEvents) -> None:
        client = raw(hive_node)
        client.connect(5, "willing")
        client.disconnect(0x04)  # DISCONNECT "with will message": the client still said goodbye
        eventually(lambda: len(watcher.of("willing")) == 3)
        assert watcher.of("willing")[1:] == [("disconnect-packet", 4), ("disconnected", True)]

    def test_session_present_and_takeover(self, clients: Clients,
                                          watcher: ClientEvents) -> None:
        first = clients("kept", expiry=60)
        first.disconnect()
        second = clients("kept", expiry=60, clean=False)
        assert second.session_present
        third = clients("kept", expiry=60, clean=False)
        assert third.session_present
        eventually(lambda: len(watcher.of("kept")) >= 6)
        assert watcher.of("kept") == [
            ("connected", False), ("disconnect-packet", 0), ("disconnected", True),
            ("connected", True), ("disconnected", False), ("connected", True)]


# ---------------------------------------------------------------------------- failures


class RefusesToStart:
    @hookimpl
    def hive_extension_start(self, context: ExtensionContext) -> None:
        raise ExtensionRefused("no licence file")

    @hookimpl
    def hive_authenticate(self) -> AuthDecision:
        return AuthDecision.refuse()  # would lock everybody out, were it active


class BreaksOnStart:
    @hookimpl
    async def hive_extension_start(self) -> None:
        raise OSError("disk on fire")

    @hookimpl
    def hive_authorize_publish(self) -> bool:
        return False


class TestExtensionStart:
    EXTENSIONS = (RefusesToStart, BreaksOnStart)

    def test_refused_extension_is_inactive_and_node_serves(self, hive_node: Any,
                                                            clients: Clients) -> None:
        records = {r.name: r for r in hive_node.extensions.manager.records}
        refused = records["RefusesToStart"]
        assert not refused.active and "no licence file" in refused.reason
        broken = records["BreaksOnStart"]
        assert not broken.active and "disk on fire" in broken.reason
        assert not hive_node.extensions.authenticates
        assert not hive_node.extensions.authorizes_publish
        subscriber = clients("sub")
        subscriber.subscribe("t", qos=1)
        clients("pub").publish("t", b"still serving", qos=1)
        assert subscriber.next_message().payload == b"still serving"


class Broken:
    """Every hook raises, sync or async, but the authorizers: a failing authorizer refuses
    (tests/extensions/test_fail_closed.py)."""

    @hookimpl
    def hive_authenticate(self) -> None:
        raise RuntimeError("authenticate")

    @hookimpl
    def hive_intercept_connect(self) -> None:
        raise RuntimeError("intercept connect")

    @hookimpl
    async def hive_intercept_publish_inbound(self) -> None:
        raise RuntimeError("inbound")

    @hookimpl
    def hive_intercept_publish_outbound(self) -> None:
        raise RuntimeError("outbound")

    @hookimpl
    def hive_intercept_subscribe(self) -> None:
        raise RuntimeError("subscribe")

    @hookimpl
    def hive_intercept_unsubscribe(self) -> None:
        raise RuntimeError("unsubscribe")

    @hookimpl
    def hive_client_connected(self) -> None:
        raise RuntimeError("connected")

    @hookimpl
    async def hive_client_disconnected(self) -> None:
        raise RuntimeError("disconnected")


class LetsAllIn:
    @hookimpl(trylast=True)
    def hive_authenticate(self) -> AuthDecision:
        return AuthDecision.accept()


class TestBrokenExtension:
    EXTENSIONS = (LetsAllIn, Broken)

    @pytest.mark.parametrize("version", [4, 5])
    def test_clients_keep_working(self, hive_node: Any, clients: Clients, version: int) -> None:
        subscriber, publisher = clients.subscriber_and_publisher("t/#", version=version)
        for i in range(5):
            publisher.publish("t/x", str(i).encode(), qos=1)
        assert [subscriber.next_message().payload for _ in range(5)] == [
            str(i).encode() for i in range(5)]
        subscriber.client.unsubscribe("t/#")
        publisher.disconnect()
        failures = hive_node.extensions.failures
        eventually(lambda: failures["Broken"] >= 15)  # every call of a hook above raised


# ---------------------------------------------------------------------------- persistence


class CountingStore(MemorySessionStore):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0
        self.opened = False

    async def open(self) -> Any:
        self.opened = True
        return await super().open()

    def save_session(self, session: Any) -> None:
        self.writes += 1
        super().save_session(session)

    def save_subscription(self, client_id: str, subscription: Any) -> None:
        self.writes += 1
        super().save_subscription(client_id, subscription)


class StoreProvider:
    def __init__(self) -> None:
        self.store = CountingStore()
        self.context: ExtensionContext | None = None

    @hookimpl
    def hive_session_store(self, context: ExtensionContext) -> CountingStore:
        self.context = context
        return self.store


class TestSessionStoreHook:
    @pytest.fixture
    def provider(self) -> StoreProvider:
        return StoreProvider()

    @pytest.fixture
    def hive_extensions(self, provider: StoreProvider) -> list[Any]:
        return [provider]

    def test_replaces_the_builtin_store(self, hive_node: Any, clients: Clients,
                                        provider: StoreProvider) -> None:
        assert provider.store.opened
        assert hive_node.node.broker.store is provider.store
        assert provider.context is not None and provider.context.node_data_dir is not None
        client = clients("durable", expiry=300)
        client.subscribe("d/#", qos=1)
        eventually(lambda: provider.store.writes >= 2)


# ---------------------------------------------------------------------------- services


class ServiceUser:
    def __init__(self) -> None:
        self.context: ExtensionContext | None = None

    @hookimpl
    def hive_extension_start(self, context: ExtensionContext) -> None:
        self.context = context


class TestServices:
    @pytest.fixture
    def user(self) -> ServiceUser:
        return ServiceUser()

    @pytest.fixture
    def hive_extensions(self, user: ServiceUser) -> list[Any]:
        return [user]

    def test_context(self, hive_node: Any, user: ServiceUser) -> None:
        context = user.context
        assert context is not None and context.name == "ServiceUser"
        assert context.services is hive_node.services
        assert context.data_dir.name == "ServiceUser"
        assert context.log.name == "hive.ext.ServiceUser"

    def test_publish(self, hive_node: Any, clients: Clients, user: ServiceUser) -> None:
        subscriber = clients("sub")
        subscriber.subscribe("from/extension", qos=1)
        assert user.context is not None
        services = user.context.services
        hive_node.call(services.publish, "from/extension", b"hi", 1, False, [("k", "v")])
        message = subscriber.next_message()
        assert (message.topic, message.payload, message.qos) == ("from/extension", b"hi", 1)
        assert message.properties.UserProperty == [("k", "v")]

    def test_clients_subscriptions_retained(self, hive_node: Any, clients: Clients,
                                            user: ServiceUser) -> None:
        assert user.context is not None
        services = user.context.services
        one = clients("one")
        clients("two", version=4)
        one.subscribe("a/+", qos=1)
        one.publish("keep/1", b"r1", qos=1, retain=True)
        one.publish("keep/2", b"r2", qos=0, retain=True)
        connected = hive_node.call(services.clients)
        assert sorted((c.client_id, c.protocol_version) for c in connected) == [
            ("one", 5), ("two", 4)]
        subscriptions = hive_node.call(services.subscriptions, "one")
        assert [(s.topic_filter, s.qos) for s in subscriptions] == [("a/+", 1)]
        assert hive_node.call(services.subscriptions, "nobody") == []
        eventually(lambda: len(hive_node.call(services.retained, "keep/#")) == 2)
        retained = hive_node.call(services.retained, "keep/#")
        assert sorted((r.topic, r.payload) for r in retained) == [
            ("keep/1", b"r1"), ("keep/2", b"r2")]
        assert hive_node.call(services.retained, "other/#") == []

    def test_disconnect(self, hive_node: Any, clients: Clients, user: ServiceUser) -> None:
        assert user.context is not None
        services = user.context.services
        v5 = clients("kick5")
        v3 = clients("kick3", version=4)
        assert hive_node.call(services.disconnect, "kick5") is True
        assert v5.wait_disconnected() == ReasonCode.ADMINISTRATIVE_ACTION
        assert hive_node.call(services.disconnect, "kick3") is True
        v3.wait_disconnected()
        assert hive_node.call(services.disconnect, "nobody") is False
        eventually(lambda: hive_node.call(services.clients) == [])

    def test_metrics(self, hive_node: Any, user: ServiceUser) -> None:
        assert user.context is not None
        metrics = user.context.services.metrics
        counter = metrics.counter("logins")
        counter.inc()
        counter.inc(2)
        assert counter.value == 3
        assert metrics.counter("logins") is counter


def test_clients_connected_at_stop_are_reported(hive_node_factory: Any) -> None:
    watcher = ClientEvents()
    node = hive_node_factory(extensions=[watcher])
    made = Clients(node.port)
    try:
        made("left-at-stop")
        eventually(lambda: watcher.of("left-at-stop"))
        node.stop()
        assert watcher.of("left-at-stop") == [("connected", False), ("disconnected", False)]
    finally:
        made.close()


class SubscribeAliases:
    """alias/x means private/x; a second interceptor that drops items is ignored."""

    @hookimpl(tryfirst=True)
    def hive_intercept_subscribe(self, subscriptions: list[SubscriptionInfo]) -> None:
        for subscription in subscriptions:
            if subscription.topic_filter.startswith("alias/"):
                subscription.topic_filter = "private/" + subscription.topic_filter[6:]


class DropsItems:
    @hookimpl(trylast=True)
    def hive_intercept_subscribe(self, subscriptions: list[SubscriptionInfo]) -> None:
        if any(s.topic_filter == "drop-all" for s in subscriptions):
            subscriptions.clear()


class TestSubscribeInterceptorThenAuthorization:
    EXTENSIONS = (Authorizer, SubscribeAliases, DropsItems)

    def test_authorization_sees_the_changed_filter(self, hive_node: Any) -> None:
        with raw(hive_node) as client:
            client.connect(5, "aliases")
            assert client.subscribe("alias/x", 1).reason_codes == [0x87]
            assert client.subscribe("open/x", 1).reason_codes == [1]

    def test_changing_the_number_of_items_is_ignored(self, hive_node: Any) -> None:
        from hive_core.mqtt import Subscribe, SubscriptionRequest

        with raw(hive_node) as client:
            client.connect(5, "dropper")
            client.send(Subscribe(3, [SubscriptionRequest("drop-all", 1),
                                      SubscriptionRequest("b", 0)]))
            assert client.expect(SubAck).reason_codes == [1, 0]


class ExpiryStamp:
    @hookimpl
    def hive_intercept_publish_inbound(self, publish: PublishMessage) -> None:
        if publish.topic == "short-lived":
            publish.message_expiry_interval = 120
        elif publish.topic == "forever":
            publish.message_expiry_interval = None


class TestInboundMessageExpiry:
    EXTENSIONS = (ExpiryStamp,)

    def test_interceptor_sets_and_clears_message_expiry(self, clients: Clients) -> None:
        from e2e._session_helpers import props
        from paho.mqtt.packettypes import PacketTypes

        subscriber, publisher = clients.subscriber_and_publisher("#")
        publisher.publish("short-lived", b"a", qos=1)
        message = subscriber.next_message()
        assert 118 <= message.properties.MessageExpiryInterval <= 120
        info = publisher.client.publish("forever", b"b", 1, properties=props(
            PacketTypes.PUBLISH, MessageExpiryInterval=30))
        info.wait_for_publish(WAIT)
        message = subscriber.next_message()
        assert not hasattr(message.properties, "MessageExpiryInterval")
        info = publisher.client.publish("untouched", b"c", 1, properties=props(
            PacketTypes.PUBLISH, MessageExpiryInterval=30))
        info.wait_for_publish(WAIT)
        assert 29 <= subscriber.next_message().properties.MessageExpiryInterval <= 30


def test_services_publish_refuses_a_bad_topic(hive_node: Any) -> None:
    for topic, qos in (("a/#", 0), ("", 0), ("ok", 3)):
        with pytest.raises(ValueError):
            hive_node.call(hive_node.services.publish, topic, b"x", qos)


class TestReauthentication:
    EXTENSIONS = (Challenge,)

    def test_connected_client_authenticates_again(self, hive_node: Any) -> None:
        with raw(hive_node) as client:
            _, ack = _enhanced(client, "CHALLENGE", b"hello", reply=b"proof-of-n42")
            assert ack.reason_code == 0
            client.send(Auth(0x19, {P.AUTHENTICATION_METHOD: "CHALLENGE",
                                    P.AUTHENTICATION_DATA: b"again"}))
            step = client.expect(Auth)
            assert (step.reason_code, step.properties[P.AUTHENTICATION_DATA]) == (
                0x18, b"nonce=n42")
            client.send(Auth(0x18, {P.AUTHENTICATION_METHOD: "CHALLENGE",
                                    P.AUTHENTICATION_DATA: b"proof-of-n42"}))
            done = client.expect(Auth)
            assert done.reason_code == 0
            assert done.properties[P.AUTHENTICATION_DATA] == b"welcome"
            assert client.subscribe("still/here", 0).reason_codes == [0]

    def test_failed_reauthentication_disconnects(self, hive_node: Any) -> None:
        with raw(hive_node) as client:
            _enhanced(client, "CHALLENGE", b"hello", reply=b"proof-of-n42")
            client.send(Auth(0x19, {P.AUTHENTICATION_METHOD: "CHALLENGE"}))
            client.expect(Auth)
            client.send(Auth(0x18, {P.AUTHENTICATION_METHOD: "CHALLENGE",
                                    P.AUTHENTICATION_DATA: b"wrong"}))
            client.expect_disconnect(ReasonCode.NOT_AUTHORIZED)


class SlowAuthenticator:
    @hookimpl
    async def hive_authenticate(self) -> AuthDecision:
        await asyncio.sleep(30)
        return AuthDecision.refuse()


class Fallback:
    @hookimpl(trylast=True)
    def hive_authenticate(self) -> AuthDecision:
        return AuthDecision.accept()


class TestDeadline:
    EXTENSIONS = (Fallback, SlowAuthenticator)

    def test_slow_hook_falls_back_after_the_deadline(self, hive_node: Any,
                                                     clients: Clients) -> None:
        hive_node.extensions.deadline = 0.3
        started = time.monotonic()
        clients("patient")
        assert 0.25 < time.monotonic() - started < WAIT
        assert hive_node.extensions.failures["SlowAuthenticator"] == 1


class SlowOutbound:
    @hookimpl
    async def hive_intercept_publish_outbound(self, client: ClientInfo,
                                              publish: PublishMessage) -> None:
        await asyncio.sleep(random.uniform(0, 0.005))
        publish.payload = publish.payload + b"!"


class UnsubscribeRename:
    @hookimpl
    def hive_intercept_unsubscribe(self, topic_filters: list[str]) -> None:
        topic_filters[:] = [f.replace("nick/", "real/") for f in topic_filters]


class TestAsyncOutboundAndUnsubscribe:
    EXTENSIONS = (SlowOutbound, UnsubscribeRename)

    @pytest.mark.parametrize("qos", [0, 1])
    def test_async_outbound_keeps_order(self, clients: Clients, qos: int) -> None:
        subscriber, publisher = clients.subscriber_and_publisher("seq", qos)
        received = in_order(publisher, subscriber, "seq", 40)
        assert received == [f"{i}!".encode() for i in range(40)]

    def test_unsubscribe_interceptor_changes_filters(self, hive_node: Any,
                                                     clients: Clients) -> None:
        subscriber = clients("sub")
        subscriber.subscribe("real/x", qos=1)
        subscriber.client.unsubscribe("nick/x")
        eventually(lambda: hive_node.call(hive_node.services.subscriptions, "sub") == [])
