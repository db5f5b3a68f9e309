"""One client's MQTT protocol, without sockets: bytes in; packets to send and actions out.

A :class:`Channel` is what h11's ``Connection`` is to HTTP: it decodes what the client sent,
applies the rules of CONNECT, PUBLISH (topic aliases, QoS 2 duplicates, receive maximum), the
acknowledgements, SUBSCRIBE, DISCONNECT and AUTH, and answers with encoded packets in ``out``.
It never reads a socket, writes one or starts a timer: whoever carries it (an asyncio protocol in
``_connection.py``, a WebSocket adapter, a unit test) gives it a :class:`ChannelIo` through which
the batched output is written, the connection closed and the keep-alive deadline armed.

It reads no clock and knows no event loop: the time comes from the broker's clocks
(``broker.monotonic``, ``broker.wall_time``), the rules of a CONNECT are decided in
``_connect.py``, and what must be awaited (an ``async`` authenticator, the cluster's fence, a
session fetched from another node) runs as a coroutine of ``_steps.py``, started by the broker,
which calls the channel back; while one runs, later packets wait in order (``_deferred``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from hive_core.broker import _extension_flow as flow
from hive_core.broker import _handlers as handlers
from hive_core.broker import _steps as steps
from hive_core.broker._acks import NO_ACKS, CommittedAcks, NoAcks
from hive_core.broker._connect import connect_terms, limits_into
from hive_core.broker._extension_flow import Refusal
from hive_core.broker._inbound import NO_ALIASES, publish_properties
from hive_core.broker._message import Message
from hive_core.broker._overload import READ_FREELY
from hive_core.broker._session import NO_OUTPUT, Session
from hive_core.mqtt import (
    MAX_PACKET_SIZE,
    PINGRESP,
    PUBACK,
    PUBREC,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    MQTTError,
    PacketDecoder,
    PingReq,
    PropertyId,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    ReasonCode,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
    encode_ack,
    encode_packet,
    v3_return_code,
)
from hive_core.plugins import WarningGate
from hive_ext_api import ClientInfo

if TYPE_CHECKING:
    from hive_core.broker._host import ChannelHost

log = logging.getLogger("hive.connection")
access_log = logging.getLogger("hive.access")  # connects, disconnects, refusals: one line each

P = PropertyId
RC = ReasonCode
_PROTOCOL_NAMES = {3: "3.1", 4: "3.1.1", 5: "5"}
_CLUSTER_FULL = "a node it is for has not acknowledged the most kept for it"
# A busy MQTT 3 publisher (never told a receive maximum) is throttled many times a second: one
# line a minute says so, the metric hive_receive_maximum_throttled counts every time.
_THROTTLE_NOTES = WarningGate(log, period=60.0, level=logging.INFO)
_REFUSED: dict[int, str] = {RC.NOT_AUTHORIZED: "not authorized by an extension"}


class ChannelIo(Protocol):
    """What a channel needs from the network side."""

    def write(self, data: bytes) -> None:
        """Send bytes to the client (already batched by the broker's flush)."""
        ...

    def close(self) -> None:
        """Close the connection (after what was written)."""
        ...

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """``peername`` and ``ssl_object``, as asyncio transports answer them."""
        ...

    def arm_deadline(self, seconds: float) -> None:
        """Call :meth:`Channel.check_deadline` in ``seconds`` (0: never); replaces the last."""
        ...

    def pause_reading(self) -> None:
        """Stop handing received bytes to the channel until :meth:`resume_reading`."""
        ...

    def resume_reading(self) -> None: ...


class _EndedIo:
    """The io of a channel whose connection ended: the channel no longer refers to its
    connection, so the two are freed at once, without waiting for a cyclic collection."""

    def write(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def arm_deadline(self, seconds: float) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


_ENDED_IO = _EndedIo()


class Channel:
    """One client connection's MQTT state machine (see the module docstring)."""

    __slots__ = (
        "_deferred", "_fenced", "_inbound_aliases", "acks", "auth_method", "auth_waiter",
        "broker", "client_id", "closed", "congested", "decoder", "disconnect_received", "held",
        "info", "io", "keep_alive", "last_read", "listener", "mark", "max_out_packet", "out",
        "out_alias_max", "outbound_aliases", "outbound_chain", "peer_gone", "problem_info",
        "read_until", "received", "requested_expiry", "send_window", "session", "throttled",
        "username", "version", "will_sent_ok",
    )

    def __init__(self, broker: ChannelHost, io: ChannelIo, listener: str = "tcp") -> None:
        self.broker = broker
        self.io = io
        self.listener = listener
        settings = broker.settings
        self.decoder = PacketDecoder(max_packet_size=settings.max_packet_size,
                                     max_connect_size=settings.max_pre_connect_size)
        self.version = 4
        self.session: Session | None = None
        self.client_id = ""
        self.closed = False
        self.congested = False
        self.out: list[bytes] = NO_OUTPUT  # a list of its own while there is output
        self.keep_alive = 0
        self.last_read = broker.monotonic()
        self.send_window = broker.settings.inflight_window
        self.max_out_packet = MAX_PACKET_SIZE
        self.out_alias_max = 0
        self.outbound_aliases: dict[str, int] = NO_ALIASES  # a dict if the client allows
        self.problem_info = True
        self.will_sent_ok = False  # DISCONNECT 0x00 received: the will is discarded
        self.disconnect_received = False  # the client said goodbye (any reason code)
        self.requested_expiry = 0  # what CONNECT asked for, before the node's cap
        self.username: str | None = None
        self._inbound_aliases: dict[int, str] = NO_ALIASES  # a dict once the client uses one
        self.acks: CommittedAcks | NoAcks = NO_ACKS  # made by the first send_after_commit
        # While an extension answers, later packets wait here (None: not waiting).
        self._deferred: list[Any] | None = None
        self._fenced = False  # what is deferred waits for the cluster's fence
        self.auth_waiter: Any = None  # a future the next AUTH answers (broker/_steps.py)
        self.info: ClientInfo | None = None  # made at CONNECT when extensions need it
        self.auth_method: str | None = None
        self.outbound_chain: Any = None  # the step of async outbound interceptors (_outbox.py)
        self.peer_gone = False  # the network side closed (see connection_lost)
        self.throttled = False  # reading paused: past the receive maximum (strategy throttle)
        self.held = False  # reading paused: overload protection took this client's credit
        self.received = self.mark = 0  # bytes read; at overload protection's last count
        self.read_until = READ_FREELY  # overload protection: hold reading past this many bytes
        broker.accept(self)
        io.arm_deadline(broker.settings.connect_timeout)

    # ------------------------------------------------------------------ input

    def receive_data(self, data: bytes) -> None:
        """Bytes from the client: every whole packet in them is handled, in order."""
        if self.closed:
            return
        self.last_read = now = self.broker.monotonic()
        self.received += len(data)
        if self.received > self.read_until:  # its share of this tenth of a second is spent
            self.hold_reading()
        fence = self.broker.input_fence
        if (fence.up or now - fence.ticked > fence.after) and self._deferred is None:
            self._wait_for_the_fence(now)
        # Before its CONNECT is accepted a client may send little: no megabytes for a stranger.
        if self.session is None and self._deferred is not None \
                and self.received > self.broker.settings.max_pre_connect_size:
            self.refuse(RC.PACKET_TOO_LARGE, "more than max-pre-connect-size bytes before the "
                        "CONNECT was accepted")
            return
        try:
            packets = self.decoder.feed(data)
        except MQTTError as exc:
            self.refuse(exc.reason_code, str(exc))
            return
        try:
            self._handle(packets)
        except Exception:  # a bug must cost one connection, never the node
            log.exception("internal error on the connection of %r", self.client_id or "?")
            self.refuse(RC.IMPLEMENTATION_SPECIFIC_ERROR, "internal error")

    def _handle(self, packets: list[Any]) -> None:
        session = self.session
        for index, packet in enumerate(packets):
            if self.closed:
                return
            kind = type(packet)
            if self._deferred is not None:
                if kind is Auth and self.auth_waiter is not None:
                    waiter, self.auth_waiter = self.auth_waiter, None
                    waiter.set_result(packet)
                    continue
                self._deferred.extend(packets[index:])
                return
            if kind is Publish:
                self._on_publish(packet)
            elif session is None:
                if kind is Connect:
                    self._on_connect(packet)
                    session = self.session
                else:
                    self.refuse(RC.PROTOCOL_ERROR, "first packet must be CONNECT")
            else:
                handler = _HANDLERS.get(kind)
                if handler is None:
                    self.refuse(RC.PROTOCOL_ERROR, f"unexpected {kind.__name__}")
                else:
                    handler(self, packet)

    def connection_lost(self) -> None:
        """The network side is gone (closed or broken). What the client sent before (a PUBLISH,
        its DISCONNECT) while an extension step held it back is handled once the step is done.
        """
        self.peer_gone = True
        self.out = NO_OUTPUT
        self.decoder.release()
        if self.auth_waiter is not None:
            self.auth_waiter.set_result(None)
            self.auth_waiter = None
        if self._deferred is None:
            self._lost()

    def _lost(self) -> None:
        if not self.closed:
            self.closed = True
            self._ended()

    def _ended(self) -> None:
        self.decoder.release()
        self.io = _ENDED_IO
        self.broker.connection_closed(self, self.session, self.disconnect_received,
                                      self.will_sent_ok)

    @property
    def delivering(self) -> bool:
        """Messages wait for its acknowledgement (never held: they drain the backlog)."""
        session = self.session
        return session is not None and bool(session.inflight or session.queue)

    def hold_reading(self) -> None:
        """Overload protection: stop reading from this client (see broker/_overload.py)."""
        if not self.held and not self.closed:
            self.held = True
            if not self.throttled:
                self.io.pause_reading()

    def release_reading(self) -> None:
        if self.held:
            self.held = False
            if not self.throttled and not self.closed:
                self.io.resume_reading()

    def pause_writing(self) -> None:
        self.congested = True

    def resume_writing(self) -> None:
        self.congested = False
        if self.session is not None:
            self.broker.outbox.drain(self.session)

    def check_deadline(self, now: float) -> None:
        """The deadline armed through the io passed: no CONNECT in time, or keep alive missed."""
        if self.closed:
            return
        if self.session is None:
            log.info("no CONNECT within %.1f s: closing", self.broker.settings.connect_timeout)
            self.close()
            return
        if self.held or self.throttled:  # the node does not read it: its silence is ours
            self.last_read = now
        # Reads only move last_read; the deadline is re-armed for what is left, not per read.
        left = self.last_read + self.keep_alive * 1.5 - now
        if left > 0:
            self.io.arm_deadline(left)
            return
        log.info("client %r missed its keep alive", self.client_id)
        self.close(RC.KEEP_ALIVE_TIMEOUT, "keep alive timeout")

    def _wait_for_the_fence(self, now: float) -> None:
        """This node did not run for a while (cluster/_fence.py): what the client sent waits,
        in order, until the members have said what they did meanwhile (a session of this
        node taken over, its client moved and its PUBLISHes sent again elsewhere)."""
        waiter = self.broker.input_waits(now)
        if waiter is not None:
            self._fenced = True
            self.defer(waiter)

    def defer(self, step: Awaitable[Any]) -> None:
        """Hold later packets back until an extension's answer is in, then go on in order."""
        self._deferred = []
        self.broker.spawn(steps.run(self, step))

    def step_done(self) -> None:
        """The step :meth:`defer` waited for is over: what the client sent meanwhile now."""
        backlog, self._deferred = self._deferred, None
        if self._fenced:
            self._fenced = False
            if self.peer_gone and backlog:
                # The client closed this connection meanwhile: it sends again, on its next
                # one (maybe to another node, which routed it already), what was not
                # acknowledged here. Handled now, a PUBLISH would be routed twice.
                log.info("client %r closed its connection while its input waited for the "
                         "cluster: %d packets it sent are not handled (it sends again what "
                         "was not acknowledged)", self.client_id, len(backlog))
                backlog = None
        if backlog and not self.closed:
            try:
                self._handle(backlog)
            except Exception:
                log.exception("internal error on the connection of %r", self.client_id or "?")
                self.refuse(RC.IMPLEMENTATION_SPECIFIC_ERROR, "internal error")
        self.flush()
        if self.peer_gone and self._deferred is None:
            self._lost()

    # -- the client's side of an AUTH exchange (flow.AuthConversation)

    def send_auth(self, properties: dict[PropertyId, Any]) -> None:
        self.send_packet(Auth(RC.CONTINUE_AUTHENTICATION, properties))
        self.flush()

    def next_auth(self) -> Coroutine[Any, Any, Auth | None]:
        return steps.next_auth(self)

    def client_info(self) -> ClientInfo:
        """This client as extensions see it."""
        peer = self.io.get_extra_info("peername")
        cert = None
        ssl_object = self.io.get_extra_info("ssl_object")
        if ssl_object is not None:
            cert = ssl_object.getpeercert(binary_form=True)
        return ClientInfo(self.client_id, self.version, self.username, self.listener,
                          (peer[0], peer[1]) if peer else None, cert)

    # ------------------------------------------------------------------ output

    def send(self, data: bytes) -> None:
        if not self.out:
            self.out = [data]
            return self.broker.mark_dirty(self)
        self.out.append(data)

    def flush(self) -> None:
        out = self.out
        if out:
            self.out = NO_OUTPUT
            if not self.closed and not self.peer_gone:
                self.io.write(out[0] if len(out) == 1 else b"".join(out))

    def send_packet(self, packet: Any) -> None:
        self.send(encode_packet(packet, self.version))

    def close(self, reason: int | None = None, reason_string: str | None = None) -> None:
        """Close from the server side, with a DISCONNECT for MQTT 5 clients that are connected."""
        if self.closed:
            return
        if reason is not None and self.version == 5 and self.session is not None:
            props: dict[PropertyId, Any] = {}
            if reason_string and self.problem_info:
                props[P.REASON_STRING] = reason_string
            self.send_packet(Disconnect(reason, props))
        self.flush()
        self.closed = True
        self.io.close()
        self._ended()

    def refuse(self, reason: int, message: str) -> None:
        """Bad input: the right reason code to the client, then close this one connection."""
        log.info("closing connection of %r: %s (reason 0x%02X)", self.client_id or "?", message,
                 reason)
        self.broker.metrics.protocol_errors += 1
        if self.session is None:
            if self.decoder.protocol_version == 5:
                self.version = 5
                self.send_packet(ConnAck(False, reason))
            elif reason in (RC.UNSUPPORTED_PROTOCOL_VERSION, RC.CLIENT_IDENTIFIER_NOT_VALID):
                self.send(encode_packet(ConnAck(False, v3_return_code(reason)), 4))
        self.close(reason, message)

    # ------------------------------------------------------------------ CONNECT

    def _on_connect(self, connect: Connect) -> None:
        if self._extensions_decide(connect):
            self.defer(steps.connect_with_extensions(self, connect))
        elif self.session_elsewhere(connect):
            self.defer(steps.connect_in_cluster(self, connect, {}))
        else:
            self.accept_connect(connect, {})

    def session_elsewhere(self, connect: Connect) -> bool:
        """Whether another node may hold a session this CONNECT resumes (clean start drops it:
        the node that holds it ends it when this one says the client connected here)."""
        return bool(connect.client_id) and not connect.clean_start \
            and self.broker.custody.sessions_elsewhere()

    def _extensions_decide(self, connect: Connect) -> bool:
        extensions = self.broker.extensions
        return bool(extensions.authenticates or extensions.intercepts_connect
                    or P.AUTHENTICATION_METHOD in connect.properties
                    or (connect.will is not None and extensions.authorizes_publish))

    def refuse_connect(self, reason: int, reason_string: str | None = None) -> None:
        """CONNACK with a refusal (an MQTT 3 return code for 3.x clients), then close."""
        access_log.info("refusing CONNECT of %r: reason 0x%02X %s", self.client_id, reason,
                        reason_string or "")
        if self.version == 5:
            props = {P.REASON_STRING: reason_string} if reason_string else {}
            self.send_packet(ConnAck(False, reason, props))
        else:
            self.send_packet(ConnAck(False, v3_return_code(reason)))
        self.close()

    def accept_connect(self, connect: Connect, ack: dict[PropertyId, Any]) -> None:
        """Everything after authentication: limits, the session, CONNACK, what was in flight."""
        broker = self.broker
        settings = broker.settings
        version = self.version = connect.protocol_version
        self.client_id = connect.client_id  # a refusal names it
        self.auth_method = ack.get(P.AUTHENTICATION_METHOD)
        terms = connect_terms(connect, ack, settings, broker.has_room_for)
        if isinstance(terms, Refusal):
            self.refuse_connect(terms.reason_code, terms.reason_string)
            return
        client_id, keep_alive, expiry = terms.client_id, terms.keep_alive, terms.expiry
        self.keep_alive, self.requested_expiry = keep_alive, terms.requested_expiry
        self.send_window, self.max_out_packet = terms.send_window, terms.max_out_packet
        self.out_alias_max, self.problem_info = terms.out_alias_max, terms.problem_info
        if terms.out_alias_max:
            self.outbound_aliases = {}
        self.client_id, self.username = client_id, connect.username
        session, present = broker.attach(self, client_id, version, connect.clean_start, expiry,
                                         connect.will)
        self.session = session
        self.io.arm_deadline(keep_alive * 1.5)
        self.decoder.max_packet_size = settings.max_packet_size

        if version == 5:
            limits_into(ack, settings, connect.properties, client_id)
        # MQTT 3.1 has no session present flag: that CONNACK byte is reserved, always 0.
        self.send_packet(ConnAck(present and version >= 4, 0, ack))
        peer = self.io.get_extra_info("peername")
        access_log.info("client %r connected from %s on %s (MQTT %s%s%s)", client_id,
                        f"{peer[0]}:{peer[1]}" if peer else "?", self.listener,
                        _PROTOCOL_NAMES.get(version, version),
                        f", user {self.username!r}" if self.username else "",
                        ", session resumed" if present else "")
        broker.resume(session)
        extensions = broker.extensions
        if extensions.any_client_hooks:
            info = self.info = self.client_info()
            if extensions.watches_clients:
                broker.client_event(client_id, extensions.client_connected(info, present))

    # ------------------------------------------------------------------ PUBLISH in

    def _on_publish(self, packet: Publish) -> None:
        session = self.session
        if session is None:
            self.refuse(RC.PROTOCOL_ERROR, "PUBLISH before CONNECT")
            return
        broker = self.broker
        settings = broker.settings
        qos = packet.qos
        topic = packet.topic
        props = packet.properties
        expiry_at = None
        if props:  # MQTT 5 (broker/_inbound.py)
            answer = publish_properties(topic, props, self._inbound_aliases, settings,
                                        broker.wall_time)
            if isinstance(answer, Refusal):
                self.refuse(answer.reason_code, answer.reason_string or "")
                return
            topic, props, expiry_at, self._inbound_aliases = answer
        elif not topic:
            self.refuse(RC.PROTOCOL_ERROR, "empty topic without a topic alias")
            return
        if qos > settings.maximum_qos:
            self.refuse(RC.QOS_NOT_SUPPORTED, f"QoS {qos} above the maximum")
            return
        if packet.retain and not settings.retain_available:
            self.refuse(RC.RETAIN_NOT_SUPPORTED, "retained messages are disabled")
            return
        length = len(topic)  # the limits, inline: this runs for every message
        if length > settings.max_topic_length or (
                length >= settings.max_topic_levels
                and topic.count("/") >= settings.max_topic_levels):
            self.refuse(RC.TOPIC_NAME_INVALID, settings.topic_too_big(topic) or "")
            return
        if topic.startswith("$SYS/") or topic == "$SYS":
            # The broker's own namespace: clients may read it, not write it.
            log.debug("publish of %r to %r refused: clients may not publish under $SYS/ "
                      "(0x%02X)", session.client_id, topic, RC.NOT_AUTHORIZED)
            if qos:
                self._ack_publish(packet, RC.NOT_AUTHORIZED, False)
            return
        if qos == 2 and packet.packet_id in session.inbound_qos2:
            # A resend, DUP flag or not (paho resends without it after some reconnects): the
            # exchange is still open here, because a PUBCOMP leaves only once it is forgotten
            # on disk, so the client cannot have moved on to a new message with this id. Its
            # forwards may wait for their record still: then so does this PUBREC.
            self._ack_publish(packet, RC.SUCCESS, packet.packet_id in (session.unconfirmed or ()))
            return
        if qos and len(session.inbound_qos2) + len(self.acks.waiting) \
                >= settings.server_receive_maximum and self._past_receive_maximum(session):
            return
        message = Message(topic, packet.payload, qos, packet.retain, props, session.client_id,
                          expiry_at)
        if qos and broker.refused(message):  # a node it is for has not taken enough of ours
            return self.publish_refused(packet, RC.QUOTA_EXCEEDED, cluster=True)
        extensions = broker.extensions
        if not qos and extensions.routes_plainly:
            broker.publish(message)  # QoS 0: nothing to acknowledge
            return
        if extensions.on_publish:
            assert self.info is not None
            verdict = flow.check_publish(extensions, self.info, message)
            if verdict is not None:
                if isinstance(verdict, int):
                    self.publish_refused(packet, verdict)
                else:
                    self.defer(steps.publish_when_checked(self, packet, message, verdict))
                return
        self.route(packet, message)

    def _past_receive_maximum(self, session: Session) -> bool:
        """A QoS 1/2 PUBLISH beyond the receive maximum: True when the connection was closed.

        Strategy ``disconnect`` (the default) closes an MQTT 5 client with 0x93 (MQTT 5, 3.3.4).
        Strategy ``throttle``, and ``disconnect`` for an MQTT 3 client (which was never told a
        receive maximum and has no 0x93), handles the PUBLISH and stops reading until the
        acknowledgements waiting for the disk are out (counting PUBRELs still owed by the
        client would wait for packets that are not read any more).
        """
        limit = self.broker.settings.server_receive_maximum
        if self.broker.settings.receive_maximum_strategy == "disconnect" and self.version == 5:
            # A waiting PUBREC is in inbound_qos2 already: count only waiting PUBACKs.
            pending = len(session.inbound_qos2) + self.acks.pubacks_waiting()
            if pending >= limit:
                self._refuse_after_acks(RC.RECEIVE_MAXIMUM_EXCEEDED, "receive maximum exceeded")
                return True
            return False
        if len(self.acks.waiting) >= limit and not self.throttled:
            self.throttled = True
            self.broker.metrics.receive_maximum_throttled += 1
            _THROTTLE_NOTES.warn("throttled", "client %r sent more than %d QoS 1/2 messages "
                                 "awaiting acknowledgement: reading from it pauses until they "
                                 "are acknowledged", self.client_id, limit)
            if not self.held:  # else paused already, by overload protection
                self.io.pause_reading()
        return False

    def _refuse_after_acks(self, reason: int, message: str) -> None:
        """Close with ``reason``, but only once the acknowledgements of what was routed are
        out: a client that resends its backlog after every reconnect (paho-mqtt 2.x ignores
        the receive maximum then) gets that much further each time instead of never. What
        follows in the stream is not handled: the client sends it again."""
        self._deferred = []
        self.io.pause_reading()
        self.broker.spawn(steps.close_when_acknowledged(self, reason, message))

    def publish_refused(self, packet: Publish, code: int, cluster: bool = False) -> None:
        # DEBUG: a refused client may retry at its own pace, and every refusal would be a line.
        why = _CLUSTER_FULL if cluster else _REFUSED.get(code, "stopped by an extension")
        log.debug("publish of %r to %r refused: %s (0x%02X)", self.client_id, packet.topic, why,
                  code)
        if cluster and self.version != 5:  # MQTT 3 cannot refuse in a PUBACK: it closes
            self._refuse_after_acks(code, _CLUSTER_FULL)  # (never from an extension's step)
        elif packet.qos:  # (an MQTT 3 client gets a plain PUBACK: it has no reason code)
            self._ack_publish(packet, code, False)

    def route(self, packet: Publish, message: Message) -> None:
        session = self.session
        assert session is not None
        broker = self.broker
        if broker.extensions.records_publishes:
            broker.received(message)
        qos = packet.qos
        if qos == 2 and session.persistent:
            # Routed and remembered in one transaction: a crash keeps both or neither, so a
            # resend after it is neither lost nor routed twice. Other nodes get it once the
            # record is committed (on the backups too), and the record holds the message then:
            # a node taking the session over sends it on again if this one could not.
            with broker.records.atomic(), broker.forwards_held() as held:
                matched, _durable = broker.publish(message)
                forwarded = message if held() else None
                session.received_qos2(packet.packet_id, forwarded)  # type: ignore[arg-type]
                broker.records.received_qos2(session, packet.packet_id,  # type: ignore[arg-type]
                                             forwarded)
            self._ack_publish(packet, RC.SUCCESS if matched else RC.NO_MATCHING_SUBSCRIBERS,
                              True)
            return
        matched, durable = broker.publish(message)
        if qos:
            if qos == 2:
                session.received_qos2(packet.packet_id)  # type: ignore[arg-type]
            self._ack_publish(packet, RC.SUCCESS if matched else RC.NO_MATCHING_SUBSCRIBERS,
                              durable)

    def forwards_confirmation(self) -> Callable[[], None] | None:
        """For acknowledgements that wait for the forwards (broker/_acks.py): once those are
        acknowledged, the inbound QoS 2 records routed before stop carrying their messages
        (``Session.unconfirmed``): nothing is to be sent on again from them after a failure.
        Not once the connection closed: its session may be another node's by then."""
        session = self.session
        if session is None or not session.unconfirmed:
            return None
        pids = list(session.unconfirmed)

        def confirmed() -> None:
            unconfirmed = session.unconfirmed
            if self.closed or not unconfirmed:
                return
            for pid in pids:
                if unconfirmed.pop(pid, None) is not None and pid in session.inbound_qos2:
                    self.broker.records.received_qos2(session, pid)  # the row, without it
        return confirmed

    def _ack_publish(self, packet: Publish, reason: int, durable: bool) -> None:
        self.send_after_commit(encode_ack(PUBACK if packet.qos == 1 else PUBREC,
                                          packet.packet_id or 0, reason, self.version), durable,
                               forwards=durable)

    def send_after_commit(self, data: bytes, durable: bool = True, forwards: bool = False) -> None:
        """Send ``data`` once what it confirms is committed (``durable``; ``forwards``: and
        forwarded), after every acknowledgement waiting before it (broker/_acks.py)."""
        if self.acks is NO_ACKS:
            self.acks = CommittedAcks(self, self.broker)
        self.acks.send(data, durable, forwards)

    def resume_after_throttle(self) -> None:
        self.throttled = False
        if not self.held:
            self.io.resume_reading()

    # ------------------------------------------------------------------ subscriptions

    def finish_subscribe(self, packet: Subscribe, refused: dict[int, int]) -> None:
        """Subscribe what extensions let through; ``refused`` holds their reason codes by index."""
        session = self.session
        if self.closed or session is None:
            return
        sub_ids = packet.properties.get(P.SUBSCRIPTION_IDENTIFIER)
        sub_id = sub_ids[0] if sub_ids else None
        requests = packet.subscriptions
        allowed = [r for i, r in enumerate(requests) if i not in refused]
        answer = self.broker.subscribe(session, allowed, sub_id, self.version)
        if answer is None:
            self.refuse(RC.PROTOCOL_ERROR, "no local on a shared subscription")
            return
        codes, existed = flow.with_refused(answer, refused, len(requests))
        wire = codes if self.version == 5 else [c if c < 0x80 else 0x80 for c in codes]
        self.send_packet(SubAck(packet.packet_id, wire))
        self.broker.send_retained_for(session, packet.subscriptions, codes, existed)

    def finish_unsubscribe(self, packet_id: int, filters: list[str]) -> None:
        assert self.session is not None
        codes = self.broker.unsubscribe(self.session, filters)
        self.send_packet(UnsubAck(packet_id, codes))

    # ------------------------------------------------------------------ the rest

    def _on_pingreq(self, packet: PingReq) -> None:
        self.send(PINGRESP)

    def _on_disconnect(self, packet: Disconnect) -> None:
        session = self.session
        assert session is not None
        if self.version == 5:
            expiry = packet.properties.get(P.SESSION_EXPIRY_INTERVAL)
            if expiry is not None:
                max_expiry = self.broker.settings.max_session_expiry
                if self.requested_expiry == 0 and expiry != 0:
                    self.refuse(RC.PROTOCOL_ERROR, "session expiry raised from 0 at DISCONNECT")
                    return
                session.expiry_interval = min(expiry, max_expiry)
        self.will_sent_ok = packet.reason_code != RC.DISCONNECT_WITH_WILL_MESSAGE
        self.disconnect_received = True
        extensions = self.broker.extensions
        if extensions.watches_clients and self.info is not None:
            self.broker.client_event(session.client_id, extensions.intercept_disconnect(
                self.info, packet.reason_code))
        self.flush()
        self.closed = True
        self.io.close()
        self._ended()

    def _on_connect_again(self, packet: Connect) -> None:
        self.refuse(RC.PROTOCOL_ERROR, "second CONNECT")

    def _on_auth(self, packet: Auth) -> None:
        if self.auth_method is None or not self.broker.extensions.enhanced_auth:
            self.refuse(RC.PROTOCOL_ERROR, "AUTH without an authentication method")
        else:
            self.defer(steps.reauthenticate(self, packet))

_HANDLERS: dict[type, Any] = {
    PubAck: handlers.on_puback,
    PubRec: handlers.on_pubrec,
    PubRel: handlers.on_pubrel,
    PubComp: handlers.on_pubcomp,
    Subscribe: handlers.on_subscribe,
    Unsubscribe: handlers.on_unsubscribe,
    PingReq: Channel._on_pingreq,
    Disconnect: Channel._on_disconnect,
    Connect: Channel._on_connect_again,
    Auth: Channel._on_auth,
}
