"""RoutingTable: which other nodes want a topic, checked against topic_matches by brute force."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hive_core.cluster import RoutingTable
from hive_core.mqtt import parse_shared_subscription, topic_matches

NODES = ("a", "b", "c")
LEVELS = ("x", "y", "", "$sys")


def brute_force(filters: dict[str, set[str]], topic: str) -> tuple[
        frozenset[str], dict[tuple[str, str], frozenset[str]]]:
    nodes: set[str] = set()
    groups: dict[tuple[str, str], set[str]] = {}
    for node, node_filters in filters.items():
        for topic_filter in node_filters:
            shared = parse_shared_subscription(topic_filter)
            plain = shared[1] if shared else topic_filter
            if not topic_matches(plain, topic):
                continue
            if shared:
                groups.setdefault((shared[0], plain), set()).add(node)
            else:
                nodes.add(node)
    return frozenset(nodes), {k: frozenset(v) for k, v in groups.items()}


def table_of(*routes: tuple[str, str]) -> RoutingTable:
    """A routing table with these (node, filter) routes added in order."""
    table = RoutingTable()
    for node, topic_filter in routes:
        table.add(node, topic_filter)
    return table


def test_plain_and_wildcards() -> None:
    table = table_of(("a", "sensors/+/temp"), ("b", "sensors/#"), ("c", "other"))
    assert table.match("sensors/1/temp")[0] == {"a", "b"}
    assert table.match("sensors")[0] == {"b"}  # '#' matches the parent level too
    assert table.match("other")[0] == {"c"}
    assert table.match("nothing")[0] == frozenset()


def test_dollar_topics_skip_leading_wildcards() -> None:
    table = table_of(("a", "#"), ("b", "+/monitor"), ("c", "$SYS/#"))
    assert table.match("$SYS/monitor")[0] == {"c"}
    assert table.match("x/monitor")[0] == {"a", "b"}


def test_shared_groups_by_node() -> None:
    table = table_of(("a", "$share/g/jobs/+"), ("b", "$share/g/jobs/+"), ("b", "$share/h/jobs/#"))
    nodes, groups = table.match("jobs/1")
    assert nodes == frozenset()
    assert groups == {("g", "jobs/+"): {"a", "b"}, ("h", "jobs/#"): {"b"}}


def test_remove_drop_and_replace() -> None:
    table = table_of(("a", "t/1"), ("a", "t/+"), ("b", "t/1"))
    assert table.match("t/1")[0] == {"a", "b"}
    table.remove("a", "t/1")
    assert table.match("t/1")[0] == {"a", "b"}  # t/+ still there
    table.remove("a", "t/+")
    assert table.match("t/1")[0] == {"b"}
    table.remove("a", "never/added")  # no effect, no error
    table.drop("b")
    assert table.match("t/1")[0] == frozenset()
    table.replace("c", ["t/#", "$share/g/t/1"])
    assert table.filters_of("c") == {"t/#", "$share/g/t/1"}
    assert table.match("t/1") == (frozenset({"c"}), {("g", "t/1"): frozenset({"c"})})
    table.replace("c", [])
    assert table.match("t/1") == (frozenset(), {})
    assert table._root.empty()  # every level pruned


def test_cache_follows_changes() -> None:
    table = RoutingTable()
    table.add("a", "t")
    assert table.match("t")[0] == {"a"}
    table.add("b", "t")
    assert table.match("t")[0] == {"a", "b"}
    table.remove("a", "t")
    assert table.match("t")[0] == {"b"}


level = st.sampled_from(LEVELS)
filter_level = st.sampled_from((*LEVELS, "+"))
plain_filter = st.builds(
    lambda parts, tail: "/".join(parts + (["#"] if tail else [])),
    st.lists(filter_level, min_size=0, max_size=3), st.booleans(),
).filter(bool)
topic_filter = st.one_of(
    plain_filter,
    st.builds(lambda g, f: f"$share/{g}/{f}", st.sampled_from(("g", "h")), plain_filter),
)
topic = st.lists(level, min_size=1, max_size=4).map("/".join)
operation = st.tuples(st.sampled_from(("add", "remove", "drop", "replace")),
                      st.sampled_from(NODES), st.lists(topic_filter, min_size=1, max_size=3))


@settings(max_examples=300, deadline=None)
@given(st.lists(operation, max_size=25), st.lists(topic, min_size=1, max_size=8))
def test_matches_brute_force(operations: list[tuple[str, str, list[str]]],
                             topics: list[str]) -> None:
    table = RoutingTable()
    model: dict[str, set[str]] = {}
    for index, (kind, node, filters) in enumerate(operations):
        if kind == "add":
            table.add(node, filters[0])
            model.setdefault(node, set()).add(filters[0])
        elif kind == "remove":
            table.remove(node, filters[0])
            model.get(node, set()).discard(filters[0])
        elif kind == "drop":
            table.drop(node)
            model.pop(node, None)
        else:
            table.replace(node, filters)
            model[node] = set(filters)
        if index % 5 == 0:  # match in between too, so the cache must follow the changes
            for t in topics:
                assert table.match(t) == brute_force(model, t), (t, model)
    for t in topics:
        assert table.match(t) == brute_force(model, t), (t, model)
    for node in NODES:
        assert table.filters_of(node) == model.get(node, set())


def test_a_topic_deeper_than_python_recursion_matches() -> None:
    table = RoutingTable()
    deep = "/".join(["l"] * 5000)
    table.add("a", deep)
    table.add("b", "+/" + deep.split("/", 1)[1])
    table.add("c", deep.rsplit("/", 1)[0] + "/#")
    assert table.match(deep)[0] == {"a", "b", "c"}
