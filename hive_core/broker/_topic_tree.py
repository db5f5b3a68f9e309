"""Which sessions want a topic: a trie of topic filters, with a match cache for hot topics."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from hive_core.broker._session import Session, Subscription


@dataclass(slots=True, eq=False)
class SharedGroup:
    """``$share/name/filter``: each message goes to one member."""

    name: str
    topic_filter: str
    members: dict[str, Subscription] = field(default_factory=dict)
    turn: int = 0

    def pick(self) -> Subscription | None:
        """The next member in turn, preferring members that are connected."""
        members = list(self.members.values())
        if not members:
            return None
        count = len(members)
        for step in range(count):
            candidate = members[(self.turn + step) % count]
            if candidate.session.connection is not None:
                self.turn = (self.turn + step + 1) % count
                return candidate
        candidate = members[self.turn % count]
        self.turn = (self.turn + 1) % count
        return candidate


@dataclass(slots=True)
class Delivery:
    """What one session gets for one topic: the best QoS of its matching filters, every id."""

    session: Session
    qos: int
    subscription_ids: tuple[int, ...] | None
    retain_as_published: bool
    # every matching filter, kept only when one has no-local: re-checked for the publisher itself
    no_local_filters: tuple[Subscription, ...]


class _Node:
    __slots__ = ("children", "shared", "subscriptions")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.subscriptions: dict[str, Subscription] = {}  # by client id
        self.shared: dict[str, SharedGroup] = {}  # by group name

    def empty(self) -> bool:
        return not (self.children or self.subscriptions or self.shared)


Match = tuple[list[Delivery], list[SharedGroup]]
_CACHE_LIMIT = 50_000


class TopicTree:
    def __init__(self) -> None:
        self._root = _Node()
        self._cache: dict[str, Match] = {}
        self.count = 0

    def add(self, topic_filter: str, subscription: Subscription) -> bool:
        """Add or replace; returns True when the session had no subscription on this filter."""
        node = self._root
        for level in topic_filter.split("/"):
            child = node.children.get(level)
            if child is None:
                child = node.children[level] = _Node()
            node = child
        client_id = subscription.session.client_id
        self._cache.clear()
        if subscription.share_group is not None:
            group = node.shared.get(subscription.share_group)
            if group is None:
                group = node.shared[subscription.share_group] = SharedGroup(
                    subscription.share_group, topic_filter)
            new = client_id not in group.members
            group.members[client_id] = subscription
        else:
            new = client_id not in node.subscriptions
            node.subscriptions[client_id] = subscription
        if new:
            self.count += 1
        return new

    def remove(self, topic_filter: str, client_id: str, share_group: str | None = None) -> bool:
        path = [self._root]
        for level in topic_filter.split("/"):
            child = path[-1].children.get(level)
            if child is None:
                return False
            path.append(child)
        node = path[-1]
        if share_group is not None:
            group = node.shared.get(share_group)
            if group is None or group.members.pop(client_id, None) is None:
                return False
            if not group.members:
                del node.shared[share_group]
        elif node.subscriptions.pop(client_id, None) is None:
            return False
        self.count -= 1
        self._cache.clear()
        levels = topic_filter.split("/")
        for depth in range(len(levels), 0, -1):
            if not path[depth].empty():
                break
            del path[depth - 1].children[levels[depth - 1]]
        return True

    def match(self, topic: str) -> Match:
        hit = self._cache.get(topic)
        if hit is not None:
            return hit
        by_session: dict[str, list[Subscription]] = {}
        groups: list[SharedGroup] = []
        levels = topic.split("/")
        self._collect(levels, topic.startswith("$"), by_session, groups)
        deliveries = [_aggregate(subs) for subs in by_session.values()]
        result = (deliveries, groups)
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[topic] = result
        return result

    def _collect(self, levels: list[str], dollar: bool, out: dict[str, list[Subscription]],
                 groups: list[SharedGroup]) -> None:
        """Depth first with a stack of its own: a topic of any depth cannot exhaust Python's."""
        last = len(levels)
        stack = [(self._root, 0)]
        while stack:
            node, depth = stack.pop()
            wildcard_ok = depth > 0 or not dollar
            children = node.children
            if wildcard_ok:
                multi = children.get("#")
                if multi is not None:
                    _take(multi, out, groups)
            if depth == last:
                _take(node, out, groups)
                continue
            if wildcard_ok:
                single = children.get("+")
                if single is not None:
                    stack.append((single, depth + 1))
            exact = children.get(levels[depth])  # popped first: the order recursion had
            if exact is not None:
                stack.append((exact, depth + 1))

    def shared_group(self, topic_filter: str, name: str) -> SharedGroup | None:
        node = self._root
        for level in topic_filter.split("/"):
            child = node.children.get(level)
            if child is None:
                return None
            node = child
        return node.shared.get(name)

    def filters(self) -> Iterator[Subscription]:
        stack = [self._root]
        while stack:
            node = stack.pop()
            yield from node.subscriptions.values()
            for group in node.shared.values():
                yield from group.members.values()
            stack.extend(node.children.values())


def _take(node: _Node, out: dict[str, list[Subscription]], groups: list[SharedGroup]) -> None:
    for client_id, subscription in node.subscriptions.items():
        bucket = out.get(client_id)
        if bucket is None:
            out[client_id] = [subscription]
        else:
            bucket.append(subscription)
    if node.shared:
        groups.extend(node.shared.values())


def _aggregate(subscriptions: list[Subscription]) -> Delivery:
    first = subscriptions[0]
    if len(subscriptions) == 1:
        sid = first.subscription_id
        return Delivery(first.session, first.qos, (sid,) if sid else None,
                        first.retain_as_published, (first,) if first.no_local else ())
    ids = tuple(sorted({s.subscription_id for s in subscriptions if s.subscription_id}))
    return Delivery(
        first.session,
        max(s.qos for s in subscriptions),
        ids or None,
        any(s.retain_as_published for s in subscriptions),
        tuple(subscriptions) if any(s.no_local for s in subscriptions) else (),
    )


def aggregate_without_no_local(delivery: Delivery) -> Delivery | None:
    """The delivery for a session's own message: its no-local filters do not count."""
    remaining = [s for s in delivery.no_local_filters if not s.no_local]
    return _aggregate(remaining) if remaining else None
