"""Every hook a Hive extension can implement, grouped by concern.

An implementation is a function (``def`` or ``async def``) named like the spec and marked with
``@hookimpl``; it may take any subset of the spec's arguments. Hive awaits what an ``async``
implementation returns, within a deadline; an implementation that raises or runs past the deadline
is logged and counted, and the chain goes on as if it had answered ``None`` (for a first-answer
hook) or as written on the spec.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

from hive_ext_api._version import PROJECT_NAME

if TYPE_CHECKING:
    from hive_ext_api._persistence import SessionStore
    from hive_ext_api._services import ExtensionContext
    from hive_ext_api._types import (
        AuthDecision,
        AuthExchange,
        AuthStep,
        ClientInfo,
        ClusterNodeAddress,
        ConnectInfo,
        PublishMessage,
        ReceivedPublish,
        SubscriptionInfo,
    )

hookspec = pluggy.HookspecMarker(PROJECT_NAME)

hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
"""Marks a function of an extension module as the implementation of the hook of its name."""


# ---------------------------------------------------------------------------- lifecycle


@hookspec
def hive_extension_start(context: ExtensionContext) -> None:
    """The node starts: set the extension up.

    Called once per extension, after the configuration is read and before any listener opens.
    ``context`` carries the extension's name, a data folder of its own, the node's services and
    a logger. Raise :class:`ExtensionRefused` with a reason to refuse to run: the extension is
    then deactivated (its other hooks are never called) and ``hive extensions`` shows the reason.
    Any other exception counts as a refusal too. The return value is ignored.
    """


@hookspec
def hive_extension_stop(context: ExtensionContext) -> None:
    """The node stops: release what ``hive_extension_start`` took.

    Called once per started extension after the listeners are closed, in reverse start order.
    Exceptions are logged and the node goes on stopping. The return value is ignored.
    """


# ---------------------------------------------------------------------------- discovery


@hookspec
def hive_discovery_init(own_address: ClusterNodeAddress, cluster_id: str) -> None:
    """Register this node with the discovery service.

    Called once when the cluster starts, with the address other nodes reach this node on
    (``own_address``) and the node's id (``cluster_id``). Every implementation is called.
    Errors are logged and counted; discovery retries at the next reload.
    """


@hookspec
def hive_discovery_reload() -> list[ClusterNodeAddress] | None:
    """Return the nodes the discovery service knows now.

    Called at start and then every reload interval. Every implementation is called and the
    answers are merged (duplicates dropped); ``None`` means "no information this time" and keeps
    what the previous reload said. Only proposes addresses: membership is the core's business.
    """


@hookspec(firstresult=True)
def hive_discovery_reload_interval() -> float | None:
    """Seconds between two ``hive_discovery_reload`` calls.

    Asked before each wait, so an extension may change it at run time. First answer wins;
    ``None`` asks the next extension; without an answer the node uses
    ``<discovery><extension><reload-interval>`` (60 seconds unless configured).
    """


@hookspec
def hive_discovery_destroy(own_address: ClusterNodeAddress) -> None:
    """Deregister this node: it leaves the cluster or stops.

    Every implementation is called, once. Errors are logged.
    """


# ---------------------------------------------------------------------------- authentication


@hookspec(firstresult=True)
def hive_authenticate(connect: ConnectInfo) -> AuthDecision | None:
    """Decide whether a client may connect (username / password / client certificate).

    Called for every CONNECT without an authentication method, before the session is touched.
    First answer wins: return :class:`AuthDecision` to decide, ``None`` to let the next
    authenticator decide. When authenticators are installed and none decides, the client is
    refused with NOT_AUTHORIZED; with no authenticator installed every client is let in.
    """


@hookspec(firstresult=True)
def hive_enhanced_authenticate(exchange: AuthExchange) -> AuthStep | None:
    """One step of MQTT 5 enhanced authentication (a CONNECT or AUTH with a method).

    ``exchange.method`` is the client's authentication method, ``exchange.data`` its data,
    ``exchange.step`` 0 for the CONNECT; ``exchange.state`` is kept across the steps.
    Return :meth:`AuthStep.more` to send an AUTH (continue authentication) with data,
    :meth:`AuthStep.success` to accept, :meth:`AuthStep.failure` to refuse. First answer wins;
    ``None`` means "not my method": when nobody answers the client gets BAD_AUTHENTICATION_METHOD.
    """


@hookspec(firstresult=True)
def hive_authorize_publish(client: ClientInfo, topic: str, qos: int,
                           retain: bool) -> bool | int | None:
    """May ``client`` publish to ``topic``?

    Called for every PUBLISH from a client (and for its will at CONNECT), before interceptors.
    ``True`` allows, ``False`` refuses with NOT_AUTHORIZED, an ``int`` refuses with that reason
    code (PUBACK / PUBREC for QoS 1 and 2; QoS 0 is dropped). First answer wins; ``None`` asks
    the next extension; when nobody answers the publish is allowed.
    """


@hookspec(firstresult=True)
def hive_authorize_subscribe(client: ClientInfo, topic_filter: str,
                             qos: int) -> bool | int | None:
    """May ``client`` subscribe to ``topic_filter`` (as sent, ``$share/...`` included)?

    Called once per filter of every SUBSCRIBE. ``True`` allows, ``False`` refuses with
    NOT_AUTHORIZED in the SUBACK, an ``int`` puts that reason code in the SUBACK. First answer
    wins; ``None`` asks the next extension; when nobody answers the subscription is allowed.
    """


# ---------------------------------------------------------------------------- interceptors


@hookspec
def hive_intercept_connect(connect: ConnectInfo) -> None:
    """Look at, or change, a CONNECT after it was authenticated.

    Every implementation is called in turn and sees the changes of the ones before; it may set
    ``connect.client.client_id``, ``connect.keep_alive`` and ``connect.user_properties``.
    The return value is ignored.
    """


@hookspec(firstresult=True)
def hive_intercept_publish_inbound(client: ClientInfo, publish: PublishMessage) -> int | None:
    """Look at, change, or stop a PUBLISH a client sent, before it is routed.

    Called after ``hive_authorize_publish`` allowed it. Implementations are called in turn, each
    seeing the changes of the ones before, and may change ``publish`` in place (topic, payload,
    QoS, retain, properties). Returning a reason code (>= 0x80) stops the message there: the
    publisher's PUBACK / PUBREC carries it and later interceptors are not asked. ``None`` passes
    it on. An ``async`` interceptor holds the client's later packets back until it answers.
    """


@hookspec
def hive_publishes_received(publishes: list[ReceivedPublish]) -> None:
    """Record the PUBLISHes the node accepted from its clients: for event logs and audit trails.

    Called with every PUBLISH accepted since the last call (after ``hive_authorize_publish``
    and the inbound interceptors, as routed), in the order the node accepted them, about once
    per turn of the node's loop: a batch costs one call, where an inbound interceptor costs one
    call and a copy of the message per PUBLISH. The call comes before anything these messages
    caused leaves the node: their publishers' PUBACK / PUBREC, their deliveries to subscribers,
    the frames carrying them to other nodes. So what an implementation has written when it
    returns (to a file's page cache, say) is there for every message a publisher was told was
    received. The items are read-only and valid during the call only. Must be a plain function
    (it runs in the node's loop, so it should be quick); an ``async`` one is logged as failed
    on each call. Exceptions are logged and counted. The return value is ignored.
    """


@hookspec(firstresult=True)
def hive_intercept_publish_outbound(client: ClientInfo, publish: PublishMessage) -> bool | None:
    """Look at, change, or stop one delivery to one subscriber.

    Called per delivery, just before it is sent, with a copy of the message that only this
    subscriber gets (changes to it reach this subscriber only). The first answer that is not
    ``None`` decides: ``False`` skips this subscriber (as if it were delivered), ``True``
    delivers without asking the remaining interceptors. This hook costs a call per delivery:
    implement it only when you need it; an ``async`` one holds that client's later deliveries
    back until it answers, so their order is kept.
    """


@hookspec
def hive_intercept_subscribe(client: ClientInfo, subscriptions: list[SubscriptionInfo]) -> None:
    """Look at, or change, the subscriptions of a SUBSCRIBE (before authorization).

    Every implementation is called in turn; it may change the items (filter, QoS, options) but
    not their number (a changed number is logged and the changes are ignored).
    ``hive_authorize_subscribe`` then sees the changed filters. The return value is ignored.
    """


@hookspec
def hive_intercept_unsubscribe(client: ClientInfo, topic_filters: list[str]) -> None:
    """Look at, or change, the filters of an UNSUBSCRIBE. The return value is ignored."""


@hookspec
def hive_intercept_disconnect(client: ClientInfo, reason_code: int) -> None:
    """A client sent DISCONNECT with ``reason_code``. The return value is ignored."""


# ---------------------------------------------------------------------------- client events


@hookspec
def hive_client_connected(client: ClientInfo, session_present: bool) -> None:
    """A client was accepted (after the CONNACK). The return value is ignored."""


@hookspec
def hive_client_disconnected(client: ClientInfo, graceful: bool) -> None:
    """A client's connection ended; ``graceful`` when it had sent DISCONNECT. Ignored return."""


# ---------------------------------------------------------------------------- persistence


@hookspec(firstresult=True)
def hive_session_store(context: ExtensionContext) -> SessionStore | None:
    """Provide the store behind persistent sessions, queued messages and retained messages.

    Called once at start. First answer wins; ``None`` asks the next extension. Hive's built-in
    file store answers last, so any installed extension that answers replaces it.
    """
