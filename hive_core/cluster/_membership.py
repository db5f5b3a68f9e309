"""Membership: who is in the cluster, reaching them, and noticing when they fail.

Discovery only proposes addresses; a member is a node whose HELLO (or WELCOME) arrived on a
link and was accepted (:meth:`Membership.establish`: protocol window, one link per member,
restarts and crossing dials told apart). A member leaves when it says BYE, its link closes,
its heartbeats stop for the heartbeat timeout, or the TCP health check fails; a node that left
unreachable (not shut down) stays *absent* for ABSENT_KEEP: routed to, and dialled again until
it is back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import anyio
from anyio.abc import TaskGroup

from hive_core import __version__
from hive_core.broker import NodeView
from hive_core.cluster import _progress as progress
from hive_core.cluster._fence import Fence
from hive_core.cluster._link import PeerLink
from hive_core.cluster._parts import FrameHandler, Member, NodeContext
from hive_core.cluster._transport import NodeUnreachable
from hive_core.cluster._upgrade import ProtocolWindow
from hive_core.cluster._wire import MIN_PROTOCOL_VERSION, FrameKind
from hive_core.plugins import WarningGate
from hive_ext_api import ClusterNodeAddress

log = logging.getLogger("hive.cluster")

ABSENT_KEEP = 300.0
"""Seconds a node that left stays routed to: its topic filters are kept and what it would get
is kept for it (in memory, up to 64 MiB) until it is back, when it gets it all. Until sessions
are replicated, this is what lets a paused or restarted node's persistent sessions miss
nothing. A node away longer is forgotten, and what was kept for it is dropped and counted."""
SIMULTANEOUS_DIALS = 1.0
"""Seconds after a member joined within which a second link from it is a dial that crossed
this node's own (both decide by node id); later it is the member reached under another address."""


class Membership:
    """The members and their links, the absent nodes, dialling and failure detection."""

    def __init__(self, node: NodeContext) -> None:
        self.node = node
        # The broker's roles this part takes (broker/_ports.py), and no more.
        self.view: NodeView = node.broker
        self.members: dict[str, Member] = {}
        self.links: set[PeerLink] = set()
        self._dialing: set[ClusterNodeAddress] = set()
        # Addresses dialled and the node each reached: a node behind NAT, or listed under two
        # addresses, is one node, not a new one at every discovery reload.
        self.reached: dict[ClusterNodeAddress, str] = {}
        self._protocols = ProtocolWindow(node.settings.protocol)  # whom it can cluster with
        self._dialled: dict[PeerLink, ClusterNodeAddress] = {}
        self._unreachable = WarningGate(log)  # one warning per address and minute
        self._dial_requests: asyncio.Queue[ClusterNodeAddress] = asyncio.Queue()
        self.absent: dict[str, float] = {}  # nodes that left: when they are forgotten
        self.absent_at: dict[str, tuple[ClusterNodeAddress, int]] = {}  # address, incarnation
        # Nodes linked since this node started whose SYNCED has not come (a link that closed
        # during the handshake, say): which sessions they hold is not known here yet.
        self.unheard: set[str] = set()
        # The node protocol each node last spoke here, and whether it took arrival stamps.
        self.spoke: dict[str, tuple[int, bool]] = {}
        self.takes_kept: set[str] = set()  # nodes whose HELLO said kept_publish (last time)
        # Nodes whose HELLO said counts_tails (last time): a SESSION_TAIL between this node and
        # such a node is a data frame (counted, acknowledged, sent again, rescued).
        self.counts_tails: set[str] = set()
        # This node's last two loads, taken at heartbeats: (Unix time, load), for its rates.
        self._own_loads: tuple[tuple[float, list[int]] | None,
                               tuple[float, list[int]] | None] = (None, None)
        self.fence = Fence(node.settings.heartbeat_timeout, self._fence_moved)
        self.ticked = time.monotonic()  # the heartbeat's last turn

    def frame_handlers(self) -> dict[FrameKind, FrameHandler]:
        return {
            FrameKind.SYNCED: self._on_synced,
            FrameKind.MEMBERS: self._on_members,
            FrameKind.HEARTBEAT: self._on_heartbeat,
            FrameKind.BYE: lambda member, _body: self.remove(member.node_id, "it shut down"),
        }

    @property
    def has_peers(self) -> bool:
        # Out of reach counts: a node cut off from all others must still ask (and refuse a
        # CONNECT whose session is over there), not open a fresh session.
        return bool(self.members or self.absent_at)

    def seen_of_known(self) -> tuple[int, int]:
        """(nodes this node sees, nodes it knew): itself included in both. A member silent
        for half the heartbeat timeout is not seen: cut off at the same moment as another one
        that just timed out, it would otherwise count until its own timeout a tick later."""
        fresh = time.monotonic() - self.node.settings.heartbeat_timeout / 2
        seen = sum(1 for m in self.members.values() if m.link.last_read >= fresh)
        return 1 + seen, 1 + len(self.members) + len(self.absent_at)

    def on_smaller_side(self) -> bool:
        """This node sees fewer than half of the nodes it knew: the other side, if the larger,
        takes over the sessions of the nodes it lost (``Takeover.take_over``)."""
        seen, known = self.seen_of_known()
        return 2 * seen < known

    # ------------------------------------------------------------------ discovery and dialling

    async def join(self) -> None:
        """First round of discovery: reach every node proposed, within the connect timeout."""
        node, settings = self.node, self.node.settings
        try:
            addresses = await node.extensions.discovery_reload()
        except Exception:
            log.exception("cluster discovery failed; trying again at the next reload")
            return
        with anyio.move_on_after(settings.connect_timeout):
            async with anyio.create_task_group() as dials:
                for address in addresses or ():
                    if not self._known(address):
                        dials.start_soon(self._connect, address)
        # Give the handshakes the links just opened a moment to finish, and the members the
        # time to say what they hold (SYNCED ends it): a session another node took over while
        # this one was away is not served here as if it were still this node's.
        with anyio.move_on_after(min(1.0, settings.connect_timeout)):
            while any(link.peer_id is None for link in self.links if link.outbound):
                await anyio.sleep(0.02)
        with anyio.move_on_after(settings.connect_timeout):
            while any(not m.synced for m in self.members.values() if m.protocol >= 3):
                await anyio.sleep(0.02)

    async def discover(self) -> None:
        node = self.node
        while not node.stopping:
            interval = await node.extensions.discovery_reload_interval(
                node.settings.discovery_reload_interval)
            await anyio.sleep(interval)
            try:
                addresses = await node.extensions.discovery_reload()
            except Exception:
                log.exception("cluster discovery failed; trying again at the next reload")
                addresses = None
            for address in addresses or ():
                self.dial(address)

    def _known(self, address: ClusterNodeAddress) -> bool:
        if address == self.node.address:
            return True
        reached = self.reached.get(address)
        if reached is not None and (reached == self.node.node_id or reached in self.members):
            return True
        return any(m.address == address for m in self.members.values())

    def dial(self, address: ClusterNodeAddress) -> None:
        if self.node.stopping or self.node.tasks is None or self._known(address) \
                or address in self._dialing:
            return
        self._dialing.add(address)
        # Often called from a link's callback, not from a task: anyio's task group cannot
        # start a task from there (with sniffio installed it cannot tell the event loop), so
        # the dialer task, inside the group, starts it.
        self._dial_requests.put_nowait(address)

    async def dialer(self, tasks: TaskGroup) -> None:
        while True:
            address = await self._dial_requests.get()
            tasks.start_soon(self._dial_once, address)

    async def _dial_once(self, address: ClusterNodeAddress) -> None:
        try:
            await self._connect(address)
        finally:
            self._dialing.discard(address)

    async def _connect(self, address: ClusterNodeAddress) -> None:
        node = self.node
        try:
            link = await node.transport.dial(
                address, lambda: self.new_link(outbound=True), node.settings.connect_timeout)
        except NodeUnreachable as exc:
            self._unreachable.warn(f"{address.host}:{address.port}", "cannot reach cluster node "
                                   "%s; trying again at the next discovery reload", exc)
            return
        self._unreachable.clear(f"{address.host}:{address.port}")
        self._dialled[link] = address
        self.links.add(link)
        link.send(FrameKind.HELLO, self.hello())

    def expect(self, node_id: str, address: ClusterNodeAddress, incarnation: int) -> None:
        """``node_id`` is not linked here yet but holds what is routed to it: absent until
        linked (what its filters match is kept for it), and dialled."""
        self.absent[node_id] = time.monotonic() + ABSENT_KEEP
        self.absent_at[node_id] = (address, incarnation)
        self.dial(address)

    # ------------------------------------------------------------------ the handshake

    def new_link(self, outbound: bool = False) -> PeerLink:
        node = self.node
        link = PeerLink(node.on_frame, self._on_lost, outbound, node.authentication)
        link.stale_after = node.settings.heartbeat_timeout
        link.before_write = node.broker.record_received
        return link

    def hello(self, kept_old: bool | None = None) -> dict[str, Any]:
        """HELLO's body, and WELCOME's: ``kept_old`` when this node answers a link from a node
        it is linked to already (True: it keeps that link and closes this one)."""
        node = self.node
        choice = {} if kept_old is None else {"kept_old": int(kept_old)}
        return {**choice, "id": node.node_id, "protocol": node.settings.protocol,
                "min_protocol": MIN_PROTOCOL_VERSION, "version": __version__,
                "host": node.address.host, "port": node.address.port,
                "incarnation": node.incarnation, "arrival_stamps": 1, "session_seen": 1,
                "identities": 1, "forward_on": 1, "taken_ops": 1, "kept_publish": 1,
                "link_verdict": 1, "sent_ops": 1, "counts_tails": 1,
                **self._health_hello()}

    def _health_hello(self) -> dict[str, Any]:
        """Where peers hold their health connection to this node (older peers ignore it)."""
        health = self.node.health
        if health is None:
            return {}
        hello: dict[str, Any] = {"health_port": health.port}
        if health.host:
            hello["health_host"] = health.host
        return hello

    def _keeps_other(self, link: PeerLink, existing: Member | None, peer_id: str,
                     incarnation: int, hello: dict[str, Any], answer: bool) -> bool:
        """Whether ``link`` is closed for another link to the same node: the member's, or
        (``existing`` None) the one the answering node said it keeps, whose WELCOME is on its
        way here."""
        if existing is None:
            return not answer and bool(hello.get("kept_old"))
        return self._keeps_existing(link, existing, peer_id, incarnation, hello, answer)

    def _keeps_existing(self, link: PeerLink, existing: Member, peer_id: str,
                        incarnation: int, hello: dict[str, Any], answer: bool) -> bool:
        """A second link from a member: True keeps the old one (this link is closed), False
        replaces the old one by this one.

        The answering node decides, and its WELCOME says what (``kept_old``) when it had a
        link to this same process already (not to an earlier incarnation: that link is not
        one the dialling node knows). The dialling node follows: the rule below reads each end's
        clock and load (how long ago the member joined, whether its link answered lately), and
        the two ends, deciding on their own, could each keep the link the other closed. A
        WELCOME without a verdict from a node that gives them (``link_verdict``) says it had no
        link to this node: the old link is dead at its end, or its own dial crossed this one,
        and then the ids alone decide, alike on both ends."""
        node_id = self.node.node_id
        kept = True if incarnation == existing.incarnation else None  # a verdict on this process
        if not answer and "kept_old" in hello:
            return bool(hello["kept_old"])
        if not answer and hello.get("link_verdict"):
            return (incarnation <= existing.incarnation and not existing.link.outbound
                    and peer_id < node_id)
        if incarnation > existing.incarnation:
            keep_new = True  # the peer restarted: its old link is dead, whatever it looks
        elif link.outbound == existing.link.outbound:
            # One node opened both: it reached the same peer under a second address.
            # Keep the first link; the WELCOME tells the dialling node whom it reached.
            if answer:
                link.send(FrameKind.WELCOME, self.hello(kept_old=kept))
            return True
        else:
            # Both dialled at once: keep the link opened by the node with the smaller id.
            keep_new = (link.outbound and node_id < peer_id) or (
                not link.outbound and peer_id < node_id)
        now = time.monotonic()
        if keep_new and now - existing.link.last_read < 2 * self.node.settings.heartbeat_interval \
                and now - existing.joined_at > SIMULTANEOUS_DIALS:
            # Its member is connected and answering: not a restart, not a crossing dial.
            if incarnation == existing.incarnation:
                # The same process, reached under another address (NAT, two names): the
                # WELCOME tells it whom it reached, so that it stops dialling it.
                if answer:
                    link.send(FrameKind.WELCOME, self.hello(kept_old=kept))
            else:
                log.error("a second link (from %s) claims the node id %s of a member that "
                          "is connected and answering: refused", link.peer_address, peer_id)
            return True
        if not keep_new:
            if answer and time.monotonic() - existing.joined_at > SIMULTANEOUS_DIALS:
                # Not a dial crossing ours: the peer reached this node under another
                # address. The WELCOME tells it whom; it keeps the old link as well.
                link.send(FrameKind.WELCOME, self.hello(kept_old=kept))
            return True
        return False

    def _note_spoken(self, peer_id: str, protocol: int, hello: dict[str, Any]) -> bool:
        """What the peer's HELLO says it speaks; True when it takes arrival stamps."""
        stamps = bool(hello.get("arrival_stamps"))
        self.spoke[peer_id] = (protocol, stamps)
        for flag, peers in (("kept_publish", self.takes_kept),
                            ("counts_tails", self.counts_tails)):
            if hello.get(flag):
                peers.add(peer_id)
            else:
                peers.discard(peer_id)
        return stamps

    def establish(self, link: PeerLink, hello: dict[str, Any], answer: bool = False) -> None:
        """A HELLO (``answer``: send WELCOME) or a WELCOME arrived on ``link``."""
        node = self.node
        peer_id = str(hello["id"])
        dialled = self._dialled.pop(link, None)
        if dialled is not None:
            self.reached[dialled] = peer_id
        if peer_id == node.node_id:
            link.close()  # discovery listed this node itself
            return
        protocol = min(int(hello["protocol"]), node.settings.protocol)
        refusal = self._protocols.refusal(peer_id, hello)
        if refusal is not None:
            if refusal:
                log.error("%s", refusal)
            link.close()
            return
        existing = self.members.get(peer_id)
        if existing is not None and existing.link.closed:
            existing = None  # its link is gone: nothing to choose between
        incarnation = int(hello.get("incarnation", 0))
        if self._keeps_other(link, existing, peer_id, incarnation, hello, answer):
            link.close()
            return
        swapped = False  # the same member on another link: no news for the log
        merge_goes_on = False  # ... in the middle of a merge, which the new link finishes
        if existing is not None:
            swapped = incarnation == existing.incarnation
            merge_goes_on = swapped and existing.merging
            existing.link.peer_id = None
            existing.link.close()
        link.peer_id = peer_id
        self.absent.pop(peer_id, None)
        away = self.absent_at.pop(peer_id, None)
        merging = merge_goes_on or (away is not None and away[1] == incarnation
                                    and protocol >= 3)
        address = ClusterNodeAddress(str(hello["host"]), int(hello["port"]))
        stamps = self._note_spoken(peer_id, protocol, hello)
        member = self.members[peer_id] = Member(
            peer_id, address, str(hello.get("version", "")), protocol, link, incarnation,
            merging=merging, arrival_stamps=stamps, session_seen=bool(hello.get("session_seen")),
            identities=bool(hello.get("identities")), forwards_on=bool(hello.get("forward_on")),
            taken_ops=bool(hello.get("taken_ops")), sent_ops=bool(hello.get("sent_ops")))
        if merging:
            # A session here may have a copy there (a takeover while apart), and the members
            # route to both for a moment: each session takes each message once (its identity).
            if not merge_goes_on:
                log.info("Starting cluster merge process. This may take a while. Please do not "
                         "shut down Hive. (node %s is back after being unreachable)", peer_id)
            progress.while_true(lambda: member.merging and self.members.get(peer_id) is member
                                and not node.stopping, progress.MERGE,
                                node.settings.progress_interval)
        if node.health is not None and hello.get("health_port"):
            node.health.watch(peer_id, incarnation, str(hello.get("health_host") or address.host),
                              int(hello["health_port"]))
        if swapped:
            log.debug("Cluster node %s: now on the link %s opened", peer_id,
                      "this node" if link.outbound else "it")
        else:
            log.info("Cluster node %s (%s:%d, Hive %s) joined the cluster; node protocol %d",
                     peer_id, address.host, address.port, hello.get("version"), protocol)
        if answer:  # WELCOME first: the dialling node drops every frame before it
            link.send(FrameKind.WELCOME, self.hello(_verdict(existing, incarnation)))
        node.custody.member_joined(peer_id)
        node.synchronise(member)
        node.moved.member_joined(member)
        link.send(FrameKind.MEMBERS, [[m.address.host, m.address.port]
                                      for m in self.members.values() if m.node_id != peer_id])
        if protocol >= 3:
            link.send(FrameKind.SYNCED)
            self.unheard.add(peer_id)  # until its own SYNCED
        # A new member, or one that restarted (its copy of a replica is stale): the ring again.
        if swapped:
            node.takeover.link_swapped(peer_id)
        else:
            self.log_view()
            node.takeover.ring_changed(renewed=peer_id)

    def _on_members(self, _member: Member, body: Any) -> None:
        for host, port in body:
            self.dial(ClusterNodeAddress(str(host), int(port)))

    def _on_synced(self, member: Member, _body: Any) -> None:
        member.synced = True
        self.unheard.discard(member.node_id)
        if member.merging:
            member.merging = False
            log.info("Finished cluster merge process successfully.")
        if self.fence.up:
            self.fence.check(time.monotonic(), self.members)

    def log_view(self) -> None:
        names = sorted([self.node.node_id, *self.members])
        log.info("Cluster size = %d, members : %s.", len(names), names)

    # ------------------------------------------------------------------ leaving

    def _on_lost(self, link: PeerLink) -> None:
        self.links.discard(link)
        self._dialled.pop(link, None)
        self.node.custody.link_lost(link)
        peer_id = link.peer_id
        if peer_id is not None and self.members.get(peer_id) is not None \
                and self.members[peer_id].link is link:
            self.remove(peer_id, "its connection closed")

    def remove(self, peer_id: str, why: str) -> None:
        node = self.node
        member = self.members.pop(peer_id, None)
        if member is None:
            return
        member.link.close()
        # Its filters stay in the table and what it would get is kept for it (ABSENT_KEEP).
        self.absent[peer_id] = time.monotonic() + ABSENT_KEEP
        if why != "it shut down":  # unreachable, not gone: dialled until it is back
            self.absent_at[peer_id] = (member.address, member.incarnation)
        node.forwarding.left(peer_id)
        unknown = not member.filters_known and not node.table.filters_of(peer_id)
        if unknown or member.link.went_stale:
            # Gone before it said what it subscribes to (a link lost right after a restart
            # of either node), or its link was closed as stale (this node did not run: what
            # the peer said meanwhile, a session moved there, was never read): everything is
            # kept for it, and it takes what it wants of it when it is back (REPLAY) and has
            # said again what it wants (FILTERS), rather than what its clients want being lost.
            node.table.add(peer_id, "#")
            self.view.remote_routes_changed()
            log.info("node %s left %s: every message is kept for it until it is back",
                     peer_id, "before its topic filters arrived" if unknown
                     else "while this node was not reading its link")
        if node.health is not None:
            node.health.forget(peer_id)
        log.warning("Cluster node %s left the cluster: %s", peer_id, why)
        if member.merging:  # its SYNCED never came: the merge begins again when it is back
            log.warning("Cluster merge process with node %s stopped before it finished: the "
                        "node left again. It starts again when the node is back.", peer_id)
        self.log_view()
        node.custody.member_left(peer_id)
        node.takeover.member_left(member, why)

    def _forget(self, peer_id: str) -> None:
        """A node away for longer than ABSENT_KEEP: no more routing to it."""
        node = self.node
        del self.absent[peer_id]
        self.spoke.pop(peer_id, None)
        self.takes_kept.discard(peer_id)
        self.counts_tails.discard(peer_id)
        self.absent_at.pop(peer_id, None)  # discovery finds it again if it comes back
        self.unheard.discard(peer_id)
        node.table.drop(peer_id)
        self.view.remote_routes_changed()
        dropped = node.forwarding.abandon(peer_id)
        node.forwarding.dropped += dropped
        node.custody.forget_node(peer_id, for_good=True)  # new sessions now, not a refusal
        node.moved.forgotten(peer_id)
        log.warning("Cluster node %s has been away for %.0f s: forgetting its subscriptions%s",
                    peer_id, ABSENT_KEEP,
                    f" and dropping the {dropped} messages kept for it" if dropped else "")

    # ------------------------------------------------------------------ failure detection

    def health_failed(self, peer_id: str, incarnation: int, why: str) -> None:
        member = self.members.get(peer_id)
        if member is not None and member.incarnation == incarnation:
            self.remove(peer_id, f"TCP health check failed: {why}")

    def fence_input(self, now: float) -> bool:
        """A client's input arrived at ``now``: True if it must wait for the fence (this node
        did not run for a while and has not yet heard what the members did meanwhile)."""
        fence = self.fence
        if not fence.up:
            paused = now - self.ticked - self.node.settings.heartbeat_interval
            if paused <= self.node.settings.heartbeat_timeout / 2:
                return False
            fence.raise_at(now, paused, self.members)
        return fence.up

    def _fence_moved(self, up: bool) -> None:
        self.view.input_fence.up = up

    def _ticked(self, now: float) -> None:
        self.ticked = now
        self.view.input_fence.ticked = now

    def _send_heartbeats(self, load: list[int]) -> None:
        for member in list(self.members.values()):
            member.beats_sent += 1
            # The count read from it: once it covers a heartbeat sent after a pause here, what
            # the member did before reading that heartbeat has reached this node (the fence).
            member.link.send(FrameKind.HEARTBEAT, [*load, member.beats_read])

    async def heartbeat(self) -> None:
        node = self.node
        interval = node.settings.heartbeat_interval
        timeout = node.settings.heartbeat_timeout
        last = time.monotonic()
        self._ticked(last)
        self.view.input_fence.after = interval + timeout / 2
        while not node.stopping:
            await anyio.sleep(interval)
            now = time.monotonic()
            paused, last = now - last - interval, now
            if paused > timeout / 2:
                # This process did not run (SIGSTOP, a VM pause): the peers' silence is its own.
                log.warning("this node did not run for %.1f s: the silence of the other nodes "
                            "in that time is not held against them", paused)
                self.fence.raise_at(now, paused, self.members)
                for member in self.members.values():
                    member.link.last_read = now
                self._ticked(now)
                self._send_heartbeats(self.view.load())
                continue
            self._ticked(now)
            self.fence.check(now, self.members)
            for peer_id, until in list(self.absent.items()):
                if now > until:
                    self._forget(peer_id)
            # A node that failed may be back (a split healed, a restart): no need to wait for
            # the next discovery round to find out.
            for address, _incarnation in list(self.absent_at.values()):
                self.dial(address)
            load = self.view.load()  # every member sees every node's (the control center)
            self._own_loads = (self._own_loads[1], (time.time(), load))
            for member in list(self.members.values()):
                silent = now - member.link.last_read
                if silent > timeout:
                    self.remove(member.node_id, f"no heartbeat for {silent:.1f} s")
            self._send_heartbeats(load)

    def _on_heartbeat(self, member: Member, body: Any) -> None:
        member.beats_read += 1
        if isinstance(body, list) and len(body) >= 4:  # older nodes send none
            if member.load is not None:
                member.previous = (member.load_at, member.load)
            member.load = [int(value) for value in body[:4]]
            member.load_at = time.time()
            if len(body) >= 5:  # older nodes say nothing of what they read
                member.beats_echoed = int(body[4])
                if self.fence.up:
                    self.fence.check(time.monotonic(), self.members)

    # ------------------------------------------------------------------ loads

    def loads(self) -> dict[str, tuple[float, list[int]]]:
        """Each member's load as its last heartbeat said: (when it arrived, [connections,
        sessions, messages in, messages out])."""
        return {m.node_id: (m.load_at, m.load) for m in self.members.values()
                if m.load is not None}

    def load_report(self) -> dict[str, dict[str, Any]]:
        """Every node's load, this one's included, with its message rates over the last
        heartbeat interval (None until two heartbeats came): what `hive cluster status` and
        /api/v1/cluster/nodes show for members no one asked directly."""
        report = {}
        own = self._own_loads
        sources = [(self.node.node_id, own[1], own[0])]
        sources += [(m.node_id, (m.load_at, m.load) if m.load is not None else None,
                     m.previous) for m in self.members.values()]
        for node_id, now, before in sources:
            if now is None:
                continue
            at, load = now
            entry: dict[str, Any] = {"connections": load[0], "sessions": load[1],
                                     "messages_in_per_second": None,
                                     "messages_out_per_second": None}
            if before is not None and at > before[0]:
                span = at - before[0]
                if load[2] >= before[1][2] and load[3] >= before[1][3]:
                    entry["messages_in_per_second"] = round((load[2] - before[1][2]) / span, 1)
                    entry["messages_out_per_second"] = round((load[3] - before[1][3]) / span, 1)
            report[node_id] = entry
        return report


def _verdict(existing: Member | None, incarnation: int) -> bool | None:
    """A WELCOME's ``kept_old`` when the answering node takes the link: False (this link
    replaced the member's) if that link was to the same process, else none (no link to it)."""
    return False if existing is not None and existing.incarnation == incarnation else None
