"""Which other nodes want a topic: one trie of every peer's topic filters, with a match cache."""

from __future__ import annotations

from hive_core.broker import SharedKey
from hive_core.mqtt import parse_shared_subscription


class _Level:
    __slots__ = ("children", "nodes", "shared")

    def __init__(self) -> None:
        self.children: dict[str, _Level] = {}
        self.nodes: set[str] = set()  # node ids with a plain subscription on this filter
        self.shared: dict[str, set[str]] = {}  # group -> node ids with members

    def empty(self) -> bool:
        return not (self.children or self.nodes or self.shared)


RemoteMatch = tuple[frozenset[str], dict[SharedKey, frozenset[str]]]
_NOTHING: RemoteMatch = (frozenset(), {})


class RoutingTable:
    """Filters of the peers (never this node's own: the broker's topic tree has those)."""

    def __init__(self) -> None:
        self._root = _Level()
        self._filters: dict[str, set[str]] = {}  # node id -> its filters as sent
        self._cache: dict[str, RemoteMatch] = {}

    def filters_of(self, node_id: str) -> set[str]:
        return set(self._filters.get(node_id, ()))

    def replace(self, node_id: str, filters: list[str]) -> None:
        self.drop(node_id)
        for topic_filter in filters:
            self.add(node_id, topic_filter)

    def add(self, node_id: str, topic_filter: str) -> None:
        known = self._filters.setdefault(node_id, set())
        if topic_filter in known:
            return
        known.add(topic_filter)
        shared = parse_shared_subscription(topic_filter)
        plain = shared[1] if shared else topic_filter
        level = self._root
        for part in plain.split("/"):
            level = level.children.setdefault(part, _Level())
        if shared:
            level.shared.setdefault(shared[0], set()).add(node_id)
        else:
            level.nodes.add(node_id)
        self._cache.clear()

    def remove(self, node_id: str, topic_filter: str) -> None:
        known = self._filters.get(node_id)
        if not known or topic_filter not in known:
            return
        known.discard(topic_filter)
        shared = parse_shared_subscription(topic_filter)
        plain = shared[1] if shared else topic_filter
        parts = plain.split("/")
        path = [self._root]
        for part in parts:
            child = path[-1].children.get(part)
            if child is None:
                return
            path.append(child)
        level = path[-1]
        if shared:
            members = level.shared.get(shared[0])
            if members is not None:
                members.discard(node_id)
                if not members:
                    del level.shared[shared[0]]
        else:
            level.nodes.discard(node_id)
        for depth in range(len(parts), 0, -1):
            if not path[depth].empty():
                break
            del path[depth - 1].children[parts[depth - 1]]
        self._cache.clear()

    def drop(self, node_id: str) -> None:
        """Forget every filter of a node (it left, or it sent its full set again)."""
        for topic_filter in list(self._filters.get(node_id, ())):
            self.remove(node_id, topic_filter)
        self._filters.pop(node_id, None)

    def match(self, topic: str) -> RemoteMatch:
        """The nodes with a plain subscriber for ``topic``, and the shared groups with theirs."""
        if not self._filters:
            return _NOTHING
        hit = self._cache.get(topic)
        if hit is not None:
            return hit
        nodes: set[str] = set()
        groups: dict[SharedKey, set[str]] = {}
        self._collect(topic.split("/"), topic.startswith("$"), nodes, groups)
        result = (frozenset(nodes), {k: frozenset(v) for k, v in groups.items()})
        if len(self._cache) > 50_000:
            self._cache.clear()
        self._cache[topic] = result
        return result

    def _collect(self, parts: list[str], dollar: bool, nodes: set[str],
                 groups: dict[SharedKey, set[str]]) -> None:
        """Depth first with a stack of its own: a topic of any depth cannot exhaust Python's."""
        last = len(parts)
        stack = [(self._root, 0, "")]
        while stack:
            level, depth, path = stack.pop()
            wildcards = depth > 0 or not dollar
            children = level.children
            if wildcards and "#" in children:
                self._take(children["#"], f"{path}/#" if depth else "#", nodes, groups)
            if depth == last:
                self._take(level, path, nodes, groups)
                continue
            if wildcards and "+" in children:
                stack.append((children["+"], depth + 1, f"{path}/+" if depth else "+"))
            part = parts[depth]
            exact = children.get(part)
            if exact is not None:
                stack.append((exact, depth + 1, f"{path}/{part}" if depth else part))

    @staticmethod
    def _take(level: _Level, path: str, nodes: set[str],
              groups: dict[SharedKey, set[str]]) -> None:
        nodes |= level.nodes
        for group, members in level.shared.items():
            groups.setdefault((group, path), set()).update(members)
