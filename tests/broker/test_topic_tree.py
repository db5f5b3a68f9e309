"""TopicTree without sockets: add, remove, match, the match cache and per-session aggregation."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hive_core.broker._session import Session
from hive_core.broker._topic_tree import (
    Subscription,
    TopicTree,
    aggregate_without_no_local,
)
from hive_core.mqtt import topic_matches


def session(client_id: str) -> Session:
    return Session(client_id, 5, 0)


def sub(owner: Session, topic_filter: str, qos: int = 0, **options: object) -> Subscription:
    return Subscription(owner, topic_filter, qos, **options)  # type: ignore[arg-type]


def tree_with(*filters: str) -> TopicTree:
    """One session per filter, named after it."""
    tree = TopicTree()
    for topic_filter in filters:
        tree.add(topic_filter, sub(session(topic_filter), topic_filter))
    return tree


def matched(tree: TopicTree, topic: str) -> set[str]:
    deliveries, _ = tree.match(topic)
    return {d.session.client_id for d in deliveries}


# ---------------------------------------------------------------------------- matching


def test_exact_and_single_level_wildcards() -> None:
    tree = tree_with("a/b/c", "a/+/c", "+/+/+", "a/+", "+")
    assert matched(tree, "a/b/c") == {"a/b/c", "a/+/c", "+/+/+"}
    assert matched(tree, "a/x/c") == {"a/+/c", "+/+/+"}
    assert matched(tree, "a/b") == {"a/+"}
    assert matched(tree, "a") == {"+"}
    assert matched(tree, "a/b/c/d") == set()


def test_multi_level_wildcard_matches_the_parent_level() -> None:
    tree = tree_with("a/#", "#", "a/b/#")
    assert matched(tree, "a") == {"a/#", "#"}
    assert matched(tree, "a/b") == {"a/#", "#", "a/b/#"}
    assert matched(tree, "a/b/c/d") == {"a/#", "#", "a/b/#"}
    assert matched(tree, "b") == {"#"}


def test_empty_levels_are_levels() -> None:
    tree = tree_with("+/+", "/+", "a/", "+")
    assert matched(tree, "/") == {"+/+", "/+"}
    assert matched(tree, "a/") == {"+/+", "a/"}
    assert matched(tree, "/x") == {"+/+", "/+"}
    assert matched(tree, "") == {"+"}


def test_wildcards_at_the_first_level_skip_dollar_topics() -> None:
    tree = tree_with("#", "+/x", "+/#", "$SYS/#", "$foo/+", "$foo/x", "a/+/#")
    assert matched(tree, "$SYS/x") == {"$SYS/#"}
    assert matched(tree, "$foo/x") == {"$foo/+", "$foo/x"}
    assert matched(tree, "$foo") == set()
    assert matched(tree, "a/$foo/x") == {"#", "+/#", "a/+/#"}
    assert matched(tree, "x/x") == {"#", "+/x", "+/#"}


# ---------------------------------------------------------------------------- add and remove


def test_add_reports_whether_the_subscription_is_new_and_counts() -> None:
    tree = TopicTree()
    alice = session("alice")
    assert tree.add("a/+", sub(alice, "a/+")) is True
    assert tree.add("a/+", sub(alice, "a/+", 1)) is False
    assert tree.add("a/+", sub(session("bob"), "a/+")) is True
    assert tree.count == 2
    (delivery,) = [d for d in tree.match("a/x")[0] if d.session is alice]
    assert delivery.qos == 1  # replaced, not added twice


def test_remove_only_what_is_there_and_prune() -> None:
    tree = tree_with("a/b/c", "a/b")
    assert tree.remove("a/b/c", "nobody") is False
    assert tree.remove("x/y", "a/b") is False
    assert tree.remove("a/b/c", "a/b/c") is True
    assert tree.remove("a/b/c", "a/b/c") is False
    assert tree.count == 1
    assert matched(tree, "a/b") == {"a/b"}
    assert tree.remove("a/b", "a/b") is True
    assert tree.count == 0
    assert tree._root.empty()  # every empty node was pruned


def test_remove_keeps_nodes_other_filters_pass_through() -> None:
    tree = tree_with("a/b", "a/b/c/d", "a/#")
    tree.remove("a/b", "a/b")
    assert matched(tree, "a/b/c/d") == {"a/b/c/d", "a/#"}
    tree.remove("a/b/c/d", "a/b/c/d")
    assert matched(tree, "a/b/c/d") == {"a/#"}
    assert list(tree._root.children["a"].children) == ["#"]


def test_filters_lists_every_subscription_shared_or_not() -> None:
    tree = tree_with("a", "b/+")
    tree.add("c/#", sub(session("m"), "$share/g/c/#", share_group="g"))
    assert sorted(s.topic_filter for s in tree.filters()) == ["$share/g/c/#", "a", "b/+"]


# ---------------------------------------------------------------------------- the match cache


def test_the_cache_sees_subscriptions_added_after_a_match() -> None:
    tree = tree_with("a/+")
    assert matched(tree, "a/b") == {"a/+"}
    assert tree.match("a/b") is tree.match("a/b")  # cached
    tree.add("#", sub(session("#"), "#"))
    assert matched(tree, "a/b") == {"a/+", "#"}


def test_the_cache_forgets_removed_subscriptions() -> None:
    tree = tree_with("a/+", "a/b")
    assert matched(tree, "a/b") == {"a/+", "a/b"}
    tree.remove("a/+", "a/+")
    assert matched(tree, "a/b") == {"a/b"}
    tree.remove("a/b", "a/b")
    assert tree.match("a/b") == ([], [])


def test_the_cache_sees_a_replaced_subscription() -> None:
    tree = TopicTree()
    alice = session("alice")
    tree.add("a", sub(alice, "a", 0))
    assert tree.match("a")[0][0].qos == 0
    tree.add("a", sub(alice, "a", 2, subscription_id=5))
    (delivery,) = tree.match("a")[0]
    assert (delivery.qos, delivery.subscription_ids) == (2, (5,))


def test_the_cache_sees_shared_groups_come_and_go() -> None:
    tree = TopicTree()
    member = session("m")
    assert tree.match("jobs/1") == ([], [])
    tree.add("jobs/+", sub(member, "$share/g/jobs/+", share_group="g"))
    groups = tree.match("jobs/1")[1]
    assert [(g.name, list(g.members)) for g in groups] == [("g", ["m"])]
    assert tree.remove("jobs/+", "m", "g") is True
    assert tree.match("jobs/1") == ([], [])
    assert tree._root.empty()


def test_a_full_cache_starts_over(monkeypatch) -> None:
    import hive_core.broker._topic_tree as module

    monkeypatch.setattr(module, "_CACHE_LIMIT", 3)
    tree = tree_with("#")
    for n in range(10):
        assert matched(tree, f"t/{n}") == {"#"}
        assert len(tree._cache) <= 3


# ---------------------------------------------------------------------------- aggregation


def test_one_delivery_per_session_with_the_highest_qos_and_every_id() -> None:
    tree = TopicTree()
    alice, bob = session("alice"), session("bob")
    tree.add("a/#", sub(alice, "a/#", 0, subscription_id=3))
    tree.add("a/+", sub(alice, "a/+", 2, subscription_id=1))
    tree.add("a/b", sub(alice, "a/b", 1))
    tree.add("a/b", sub(bob, "a/b", 1, subscription_id=2))
    deliveries = {d.session.client_id: d for d in tree.match("a/b")[0]}
    assert set(deliveries) == {"alice", "bob"}
    assert (deliveries["alice"].qos, deliveries["alice"].subscription_ids) == (2, (1, 3))
    assert (deliveries["bob"].qos, deliveries["bob"].subscription_ids) == (1, (2,))


def test_aggregation_without_ids_has_none() -> None:
    tree = TopicTree()
    alice = session("alice")
    tree.add("a/#", sub(alice, "a/#", 1))
    tree.add("a/b", sub(alice, "a/b", 0))
    (delivery,) = tree.match("a/b")[0]
    assert (delivery.qos, delivery.subscription_ids, delivery.no_local_filters) == (1, None, ())


def test_retain_as_published_when_any_matching_filter_asks() -> None:
    tree = TopicTree()
    alice = session("alice")
    tree.add("a/#", sub(alice, "a/#", retain_as_published=True))
    tree.add("a/b", sub(alice, "a/b"))
    assert tree.match("a/b")[0][0].retain_as_published is True
    assert tree.match("a/c")[0][0].retain_as_published is True
    tree.add("a/#", sub(alice, "a/#"))
    assert tree.match("a/b")[0][0].retain_as_published is False


def test_no_local_drops_only_the_filters_that_ask_for_it() -> None:
    tree = TopicTree()
    alice = session("alice")
    tree.add("a/#", sub(alice, "a/#", 2, no_local=True, subscription_id=1))
    tree.add("a/b", sub(alice, "a/b", 1, subscription_id=2))
    (delivery,) = tree.match("a/b")[0]
    assert delivery.qos == 2 and delivery.subscription_ids == (1, 2)
    own = aggregate_without_no_local(delivery)
    assert own is not None and (own.qos, own.subscription_ids) == (1, (2,))
    (only_no_local,) = tree.match("a/c")[0]
    assert aggregate_without_no_local(only_no_local) is None


def test_shared_groups_are_matched_apart_from_plain_subscriptions() -> None:
    tree = TopicTree()
    alice, bob = session("alice"), session("bob")
    tree.add("t/#", sub(alice, "$share/g/t/#", 1, share_group="g"))
    tree.add("t/#", sub(bob, "$share/g/t/#", 1, share_group="g"))
    tree.add("t/+", sub(alice, "$share/h/t/+", 1, share_group="h"))
    tree.add("t/#", sub(alice, "t/#", 0))
    deliveries, groups = tree.match("t/x")
    assert [d.session.client_id for d in deliveries] == ["alice"]
    assert sorted((g.name, sorted(g.members)) for g in groups) == [
        ("g", ["alice", "bob"]), ("h", ["alice"])]
    assert tree.count == 4


def test_a_shared_group_takes_turns_and_prefers_connected_members() -> None:
    tree = TopicTree()
    members = [session(name) for name in ("m0", "m1", "m2")]
    for member in members:
        tree.add("q", sub(member, "$share/g/q", share_group="g"))
        member.connection = object()  # type: ignore[assignment]
    (group,) = tree.match("q")[1]
    picks = [group.pick().session.client_id for _ in range(6)]  # type: ignore[union-attr]
    assert picks == ["m0", "m1", "m2", "m0", "m1", "m2"]
    members[1].connection = None
    picks = [group.pick().session.client_id for _ in range(4)]  # type: ignore[union-attr]
    assert picks == ["m0", "m2", "m0", "m2"]
    for member in members:
        member.connection = None
    assert group.pick() is not None  # nobody connected: still someone, to queue for


# ---------------------------------------------------------------------------- by property

levels = st.sampled_from(["a", "b", "", "$x", "c"])
topic_names = st.lists(levels, min_size=1, max_size=4).map("/".join)
filter_levels = st.sampled_from(["a", "b", "", "$x", "+", "+"])


@st.composite
def topic_filters(draw: st.DrawFn) -> str:
    parts = draw(st.lists(filter_levels, min_size=1, max_size=4))
    if draw(st.booleans()):
        parts = [*parts, "#"] if draw(st.booleans()) else ["#"]
    return "/".join(parts)


@settings(max_examples=300, deadline=None)
@given(
    filters=st.lists(topic_filters(), min_size=1, max_size=8, unique=True),
    removed=st.sets(st.integers(0, 7)),
    topics=st.lists(topic_names, min_size=1, max_size=10),
)
def test_match_agrees_with_brute_force(filters: list[str], removed: set[int],
                                       topics: list[str]) -> None:
    tree = tree_with(*filters)
    for topic in topics:  # warm the cache, so that removal has to invalidate it
        tree.match(topic)
    kept = [f for i, f in enumerate(filters) if i not in removed]
    for index in removed & set(range(len(filters))):
        assert tree.remove(filters[index], filters[index]) is True
    assert tree.count == len(kept)
    for topic in topics:
        assert matched(tree, topic) == {f for f in kept if topic_matches(f, topic)}, topic


@settings(max_examples=200, deadline=None)
@given(filters=st.lists(topic_filters(), min_size=1, max_size=8, unique=True),
       topic=topic_names)
def test_shared_groups_match_like_their_filter(filters: list[str], topic: str) -> None:
    tree = TopicTree()
    for n, topic_filter in enumerate(filters):
        tree.add(topic_filter, sub(session(f"m{n}"), f"$share/g{n}/{topic_filter}",
                                   share_group=f"g{n}"))
    groups = tree.match(topic)[1]
    assert {g.topic_filter for g in groups} == {f for f in filters if topic_matches(f, topic)}
    assert all(topic_matches(f"$share/{g.name}/{g.topic_filter}", topic) for g in groups)


@settings(max_examples=200, deadline=None)
@given(filters=st.lists(topic_filters(), min_size=1, max_size=8, unique=True))
def test_removing_everything_leaves_an_empty_tree(filters: list[str]) -> None:
    tree = tree_with(*filters)
    for topic_filter in reversed(filters):
        assert tree.remove(topic_filter, topic_filter) is True
    assert tree.count == 0
    assert tree._root.empty()


def test_a_topic_deeper_than_python_recursion_matches() -> None:
    deep = "/".join(["l"] * 5000)
    tree = tree_with(deep, deep.rsplit("/", 1)[0] + "/#", "+/" + deep.split("/", 1)[1])
    assert len(matched(tree, deep)) == 3
