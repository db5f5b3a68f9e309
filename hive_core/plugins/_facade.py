"""The typed face of the hooks: core code calls ``extensions.authenticate(...)``, never ``pm.hook``.

pluggy is synchronous and a coroutine is "an answer" to it, so the chain is walked here: each
implementation is called with the arguments it names, an awaitable result is awaited within the
deadline, and an implementation that raises or is too slow is logged, counted and skipped.
A hook nobody implements costs one attribute test. Each implementation has a
:class:`HookClock` (calls and time, for ``/metrics``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from time import perf_counter_ns
from typing import Any, TypeVar

from pluggy import HookImpl

from hive_core.plugins._hook_clock import HookClock, HookTime
from hive_core.plugins._manager import ExtensionManager
from hive_ext_api import (
    AuthDecision,
    AuthExchange,
    AuthStep,
    ClientInfo,
    ClusterNodeAddress,
    ConnectInfo,
    ExtensionContext,
    ExtensionRefused,
    PublishMessage,
    SessionStore,
    SubscriptionInfo,
    hookspecs,
)

log = logging.getLogger("hive.extensions")
T = TypeVar("T")
DEFAULT_DEADLINE = 5.0

_FAIL_CLOSED = {"hive_authorize_publish": False, "hive_authorize_subscribe": False}
"""What an implementation that raised or ran past the deadline answers, for hooks that must not
fail open: an authorizer that fails refuses (an authenticator that fails already leaves the
client without an answer, which refuses it)."""

HOOK_NAMES = tuple(sorted(name for name, spec in vars(hookspecs).items()
                         if name.startswith("hive_") and callable(spec)))
"""Every hook of the extension API: its hookspecs are the one list of them."""


class Extensions:
    """Every hook call the core makes goes through here."""

    def __init__(self, manager: ExtensionManager, deadline: float = DEFAULT_DEADLINE) -> None:
        self.manager = manager
        self.deadline = deadline
        self.failures: Counter[str] = Counter()  # by extension name
        self.refused_on_failure: Counter[str] = Counter()  # by hook: failed authorizers
        self._impls: dict[str, list[HookImpl]] = {}
        self._clocks: dict[tuple[str, str], HookClock] = {}  # by hook and extension; kept
        self._clock_of: dict[HookImpl, HookClock] = {}
        self.refresh()

    def refresh(self) -> None:
        """Re-read which hooks have implementations (after an extension was taken out)."""
        hook = self.manager.pm.hook
        self._impls = {name: list(reversed(getattr(hook, name).get_hookimpls()))
                       for name in HOOK_NAMES}
        impls = self._impls
        self._clock_of = {impl: self._clock(name, impl)
                          for name, found in impls.items() for impl in found}
        # Hooks whose every implementation is a plain function: the core may call them inline.
        self._inline = {name: not any(inspect.iscoroutinefunction(impl.function)
                                      for impl in found)
                        for name, found in impls.items()}
        self.authenticates = bool(impls["hive_authenticate"])
        self.enhanced_auth = bool(impls["hive_enhanced_authenticate"])
        self.authorizes_publish = bool(impls["hive_authorize_publish"])
        self.authorizes_subscribe = bool(impls["hive_authorize_subscribe"])
        self.intercepts_connect = bool(impls["hive_intercept_connect"])
        self.intercepts_inbound = bool(impls["hive_intercept_publish_inbound"])
        self.intercepts_outbound = bool(impls["hive_intercept_publish_outbound"])
        self.intercepts_subscribe = bool(impls["hive_intercept_subscribe"])
        self.intercepts_unsubscribe = bool(impls["hive_intercept_unsubscribe"])
        self.watches_clients = bool(impls["hive_intercept_disconnect"] or
                                    impls["hive_client_connected"] or
                                    impls["hive_client_disconnected"])
        self.on_publish = self.authorizes_publish or self.intercepts_inbound
        self.records_publishes = bool(impls["hive_publishes_received"])
        # No hook sees a client's PUBLISH: a QoS 0 one goes straight to routing.
        self.routes_plainly = not (self.on_publish or self.records_publishes)
        # The inbound interceptors as plain calls (client, publish), when none is async: the
        # one hook that runs for every message goes without keyword plumbing.
        self.inbound_calls = (
            [(impl, _positional(impl, ("client", "publish")), self._clock_of[impl])
             for impl in impls["hive_intercept_publish_inbound"]]
            if self._inline["hive_intercept_publish_inbound"] else None)
        # Hooks that need to know the client: its ClientInfo is made once, at CONNECT.
        self.any_client_hooks = (self.on_publish or self.intercepts_outbound
                                 or self.authorizes_subscribe or self.intercepts_subscribe
                                 or self.intercepts_unsubscribe or self.watches_clients
                                 or self.enhanced_auth)

    def _clock(self, hook: str, impl: HookImpl) -> HookClock:
        key = (hook, impl.plugin_name)
        clock = self._clocks.get(key)
        if clock is None:
            clock = self._clocks[key] = HookClock(hook, impl.plugin_name)
        clock.setup(inspect.iscoroutinefunction(impl.function))
        return clock

    def hook_times(self) -> list[HookTime]:
        """Calls and time of every implementation that was called, by hook and extension."""
        return [clock.reading() for _key, clock in sorted(self._clocks.items())
                if clock.calls]

    @classmethod
    def none(cls) -> Extensions:
        """No extension at all: what a bare broker (unit tests) runs with."""
        return cls(ExtensionManager(builtins=(), discover_installed=False))

    # ------------------------------------------------------------------ the chain

    def failed(self, impl: HookImpl, hook: str, what: str) -> Any:
        """For a caller that ran ``impl`` itself: it failed (logged, counted); its answer."""
        return self._failed(impl, hook, what)

    def _failed(self, impl: HookImpl, hook: str, what: str) -> Any:
        """Log and count a failed implementation; the answer that stands for it (None: none)."""
        self.failures[impl.plugin_name] += 1
        answer = _FAIL_CLOSED.get(hook)
        if answer is None:
            log.error("extension %s: %s %s; going on without its answer", impl.plugin_name,
                      hook, what, exc_info=what == "raised")
        else:
            self.refused_on_failure[hook] += 1
            log.error("extension %s: %s %s; refusing", impl.plugin_name, hook, what,
                      exc_info=what == "raised")
        return answer

    def _call(self, impl: HookImpl, kwargs: dict[str, Any]) -> Any:
        return self._clock_of[impl].call(impl.function,
                                         *[kwargs[name] for name in impl.argnames])

    async def _awaited(self, impl: HookImpl, pending: Awaitable[Any]) -> Any:
        """An ``async`` implementation's answer, within the deadline; its clock runs meanwhile."""
        clock = self._clock_of.get(impl)
        if clock is None or not clock.awaits:  # a plain function that returned an awaitable
            return await asyncio.wait_for(pending, self.deadline)
        start = perf_counter_ns()
        try:
            return await asyncio.wait_for(pending, self.deadline)
        finally:
            clock.record(perf_counter_ns() - start)

    async def _settle(self, impl: HookImpl, hook: str, pending: Awaitable[Any]) -> Any:
        try:
            return await self._awaited(impl, pending)
        except TimeoutError:
            return self._failed(impl, hook, f"took longer than {self.deadline:g} s")
        except Exception:
            return self._failed(impl, hook, "raised")

    def first(self, hook: str, **kwargs: Any) -> Any:
        """First non-None answer; an awaitable when an ``async`` implementation must be awaited."""
        impls = self._impls[hook]
        for index, impl in enumerate(impls):
            try:
                result = self._call(impl, kwargs)
            except Exception:
                result = self._failed(impl, hook, "raised")
                if result is not None:
                    return result
                continue
            if result is None:  # the usual answer, checked first: this runs per message
                continue
            if inspect.isawaitable(result):
                return self._first_async(hook, impls[index:], kwargs, result)
            return result
        return None

    async def _first_async(self, hook: str, impls: list[HookImpl], kwargs: dict[str, Any],
                           pending: Awaitable[Any]) -> Any:
        result = await self._settle(impls[0], hook, pending)
        if result is not None:
            return result
        for impl in impls[1:]:
            result = await self._answer(impl, hook, kwargs)
            if result is not None:
                return result
        return None

    async def _answer(self, impl: HookImpl, hook: str, kwargs: dict[str, Any]) -> Any:
        """One implementation's answer, awaited if need be; None when it failed."""
        try:
            result = self._call(impl, kwargs)
        except Exception:
            return self._failed(impl, hook, "raised")
        if inspect.isawaitable(result):
            result = await self._settle(impl, hook, result)
        return result

    async def each(self, hook: str, **kwargs: Any) -> list[Any]:
        """Every implementation in turn; the answers that are not None."""
        answers = []
        for impl in self._impls[hook]:
            result = await self._answer(impl, hook, kwargs)
            if result is not None:
                answers.append(result)
        return answers

    def runs_inline(self, hook: str) -> bool:
        """No implementation of ``hook`` is ``async``: it can be called without waiting."""
        return self._inline[hook]

    def each_inline(self, hook: str, **kwargs: Any) -> list[Any]:
        """:meth:`each` for a hook that :meth:`runs_inline`, in the caller's turn of the loop."""
        answers = []
        for impl in self._impls[hook]:
            try:
                result = self._call(impl, kwargs)
            except Exception:
                result = self._failed(impl, hook, "raised")
            if inspect.isawaitable(result):  # a plain function that returned a coroutine
                close = getattr(result, "close", None)
                if close is not None:
                    close()
                result = self._failed(impl, hook, "returned an awaitable from a plain function")
            if result is not None:
                answers.append(result)
        return answers

    def publishes_received(self, publishes: list[Any]) -> None:
        """The PUBLISHes accepted since the last call, to every recorder, in order."""
        self.each_inline("hive_publishes_received", publishes=publishes)

    @staticmethod
    async def resolved(answer: Any) -> Any:
        return await answer if inspect.isawaitable(answer) else answer

    # ------------------------------------------------------------------ lifecycle

    async def start(self, context_for: Callable[[str], ExtensionContext]) -> None:
        """Start every active extension; one that refuses (or fails) is taken out."""
        for impl in list(self._impls["hive_extension_start"]):
            name = impl.plugin_name
            try:
                result = self._call(impl, {"context": context_for(name)})
                if inspect.isawaitable(result):
                    await self._awaited(impl, result)
            except ExtensionRefused as refusal:
                log.error("Extension %s refused to start: %s", name, refusal)
                self.manager.deactivate(name, f"refused to start: {refusal}")
            except Exception as exc:
                log.exception("Extension %s failed to start", name)
                self.manager.deactivate(name, f"failed to start: {exc!r}")
        for record in self.manager.active():
            version = record.version if record.version not in ("", "unknown") else None
            # Hive's own plugins are part of Hive: a static node's log does not say that
            # multicast and broadcast discovery "started" (idle, they do nothing).
            log.log(logging.DEBUG if record.source == "built-in" else logging.INFO,
                    "Extension %s %s started", record.name, version or "(version unknown)")
        self.refresh()

    async def stop(self, context_for: Callable[[str], ExtensionContext]) -> None:
        for impl in reversed(self._impls["hive_extension_stop"]):
            try:
                result = self._call(impl, {"context": context_for(impl.plugin_name)})
                if inspect.isawaitable(result):
                    await self._awaited(impl, result)
            except Exception:
                log.exception("Extension %s failed to stop cleanly", impl.plugin_name)

    async def session_store(self, context: ExtensionContext) -> SessionStore | None:
        answer = await self.resolved(self.first("hive_session_store", context=context))
        return answer

    # ------------------------------------------------------------------ authentication

    async def authenticate(self, connect: ConnectInfo) -> AuthDecision:
        if not self.authenticates:
            return AuthDecision.accept()
        answer = await self.resolved(self.first("hive_authenticate", connect=connect))
        if answer is None:
            return AuthDecision.refuse(reason_string="no authenticator accepted the client")
        if isinstance(answer, AuthDecision):
            return answer
        if isinstance(answer, bool):  # a plain yes / no is understood too
            return AuthDecision.accept() if answer else AuthDecision.refuse()
        log.error("an authenticator answered %r, not an AuthDecision: refusing the client",
                  answer)
        return AuthDecision.refuse(reason_string="authentication failed")

    async def enhanced_authenticate(self, exchange: AuthExchange) -> AuthStep | None:
        return await self.resolved(
            self.first("hive_enhanced_authenticate", exchange=exchange))

    def authorize_publish(self, client: ClientInfo, topic: str, qos: int, retain: bool) -> Any:
        """``True``/``False``/reason code/``None``, or an awaitable of one."""
        return self.first("hive_authorize_publish", client=client, topic=topic, qos=qos,
                          retain=retain)

    def authorize_subscribe(self, client: ClientInfo, topic_filter: str, qos: int) -> Any:
        return self.first("hive_authorize_subscribe", client=client, topic_filter=topic_filter,
                          qos=qos)

    # ------------------------------------------------------------------ interceptors

    async def intercept_connect(self, connect: ConnectInfo) -> None:
        await self.each("hive_intercept_connect", connect=connect)

    async def intercept_publish_inbound(self, client: ClientInfo,
                                        publish: PublishMessage) -> int | None:
        """The first reason code that stops the message, or None."""
        answer = await self.resolved(self.first("hive_intercept_publish_inbound", client=client,
                                                publish=publish))
        return None if answer is None else int(answer)

    async def intercept_publish_outbound(self, client: ClientInfo,
                                         publish: PublishMessage) -> bool:
        """False when an extension stopped this delivery; the first answer decides."""
        answer = await self.resolved(self.first("hive_intercept_publish_outbound", client=client,
                                                publish=publish))
        return answer is not False

    async def intercept_subscribe(self, client: ClientInfo,
                                  subscriptions: list[SubscriptionInfo]) -> None:
        await self.each("hive_intercept_subscribe", client=client, subscriptions=subscriptions)

    async def intercept_unsubscribe(self, client: ClientInfo, topic_filters: list[str]) -> None:
        await self.each("hive_intercept_unsubscribe", client=client, topic_filters=topic_filters)

    async def intercept_disconnect(self, client: ClientInfo, reason_code: int) -> None:
        await self.each("hive_intercept_disconnect", client=client, reason_code=reason_code)

    async def client_connected(self, client: ClientInfo, session_present: bool) -> None:
        await self.each("hive_client_connected", client=client, session_present=session_present)

    async def client_disconnected(self, client: ClientInfo, graceful: bool) -> None:
        await self.each("hive_client_disconnected", client=client, graceful=graceful)

    # ------------------------------------------------------------------ discovery

    async def discovery_init(self, own_address: ClusterNodeAddress, cluster_id: str) -> None:
        await self.each("hive_discovery_init", own_address=own_address, cluster_id=cluster_id)

    async def discovery_reload(self) -> list[ClusterNodeAddress] | None:
        answers = await self.each("hive_discovery_reload")
        if not answers:
            return None
        merged: dict[ClusterNodeAddress, None] = {}
        for answer in answers:
            merged.update(dict.fromkeys(answer))
        return list(merged)

    def discovering(self) -> list[str]:
        """The active extensions that answer discovery reloads, by name."""
        return [impl.plugin_name for impl in self._impls["hive_discovery_reload"]]

    async def discovery_reload_interval(self, default: float = 60.0) -> float:
        """An extension's answer, else ``default`` (the configured ``<reload-interval>``)."""
        answer = await self.resolved(self.first("hive_discovery_reload_interval"))
        return float(answer) if answer is not None else default

    async def discovery_destroy(self, own_address: ClusterNodeAddress) -> None:
        await self.each("hive_discovery_destroy", own_address=own_address)


def _positional(impl: HookImpl, names: tuple[str, ...]) -> Callable[..., Any]:
    """``impl`` called with the hook's arguments in ``names`` order, whichever it declares."""
    function = impl.function
    wanted = tuple(impl.argnames)
    if wanted == names:
        return function
    picks = [names.index(name) for name in wanted]
    return lambda *args: function(*[args[i] for i in picks])
