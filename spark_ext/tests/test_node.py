"""The extension in real `hive run` nodes: what an event holds, kill -9, bad settings."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from prometheus_client.parser import text_string_to_metric_families

from _procs import HiveNode, free_port, wait_for
from hive_ext_spark import read_segment
from hive_ext_spark._segment import Event

pytestmark = pytest.mark.timeout(120)

FAST = "segment-max-age = 200ms\n"


def landed(node: HiveNode) -> list[Event]:
    folder = node.events_root / node.node_id
    events: list[Event] = []
    for path in sorted(folder.glob("*.events")):
        segment = read_segment(path.read_bytes())
        assert segment.header.node_id == node.node_id
        events.extend(segment.events)
    return events


def client(node: HiveNode, client_id: str, version: int = mqtt.MQTTv5,
           clean: bool = True) -> mqtt.Client:
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=version,
                    clean_session=None if version == mqtt.MQTTv5 else clean)
    c.connect("127.0.0.1", node.port, keepalive=30)
    c.loop_start()
    return c


def test_every_inbound_publish_is_recorded_with_its_properties(
        hive_run: Callable[..., HiveNode]) -> None:
    node = hive_run(FAST)
    node.wait_for_log(r"spark-events: recording every inbound PUBLISH of node \w+")
    v5 = client(node, "meter-7")
    v311 = client(node, "legacy-1", mqtt.MQTTv311)
    try:
        props = Properties(PacketTypes.PUBLISH)
        props.UserProperty = [("unit", "kWh"), ("site", "north")]
        props.ContentType = "text/plain"
        props.ResponseTopic = "replies/meter-7"
        props.CorrelationData = b"\x01\x02"
        props.PayloadFormatIndicator = 1
        props.MessageExpiryInterval = 600
        v5.publish("meters/7/energy", b"12.5", qos=2, retain=True,
                   properties=props).wait_for_publish(5)
        v5.publish("meters/7/plain", b"\x00\xff", qos=0).wait_for_publish(5)
        v311.publish("legacy/a", b"hello", qos=1).wait_for_publish(5)
        before = time.time_ns() // 1000
        wait_for(lambda: len(landed(node)) == 3, 10.0, "three landed events")
    finally:
        for c in (v5, v311):
            c.disconnect()
            c.loop_stop()
    by_topic = {e.topic: e for e in landed(node)}
    energy = by_topic["meters/7/energy"]
    assert (energy.payload, energy.qos, energy.retain, energy.client_id) == \
        (b"12.5", 2, True, "meter-7")
    assert energy.user_properties == [("unit", "kWh"), ("site", "north")]
    assert (energy.content_type, energy.response_topic, energy.correlation_data,
            energy.payload_format_indicator) == ("text/plain", "replies/meter-7", b"\x01\x02", 1)
    assert 590 <= (energy.message_expiry_interval or 0) <= 600
    plain = by_topic["meters/7/plain"]
    assert (plain.payload, plain.qos, plain.retain, plain.user_properties,
            plain.content_type) == (b"\x00\xff", 0, False, [], None)
    legacy = by_topic["legacy/a"]
    assert (legacy.payload, legacy.qos, legacy.client_id) == (b"hello", 1, "legacy-1")
    assert sorted(e.sequence for e in by_topic.values()) == [1, 2, 3]
    assert all(before - 10_000_000 < e.timestamp_us <= before for e in by_topic.values())


def test_no_acknowledged_publish_is_lost_to_kill_9_and_numbers_continue(
        hive_run: Callable[..., HiveNode]) -> None:
    """A QoS 1 publisher runs flat out; the node is killed; every PUBACKed message is there."""
    node = hive_run("segment-max-age = 60s\nsegment-max-bytes = 256KiB\n")
    acked: set[int] = set()
    publisher = client(node, "flat-out", mqtt.MQTTv311)
    lock = threading.Lock()
    mids: dict[int, int] = {}
    early: set[int] = set()  # acknowledged before publish() returned its mid
    stop = threading.Event()

    def on_publish(c: mqtt.Client, userdata: object, mid: int, rc: object,
                   props: object) -> None:
        with lock:  # paho calls this holding its own lock: never call paho holding ours
            if mid in mids:
                acked.add(mids.pop(mid))
            else:
                early.add(mid)

    publisher.on_publish = on_publish

    def publish_all() -> None:
        n = 0
        while not stop.is_set():
            info = publisher.publish(f"load/{n % 10}", str(n).encode(), qos=1)
            with lock:
                if info.mid in early:
                    early.discard(info.mid)
                    acked.add(n)
                else:
                    mids[info.mid] = n
            n += 1
            if n % 50 == 0:
                time.sleep(0.001)

    sender = threading.Thread(target=publish_all, daemon=True)
    sender.start()
    try:
        wait_for(lambda: len(acked) >= 3000, 30.0, "3000 acknowledged publishes")
        node.kill()
        stop.set()
        sender.join(5)
        with lock:
            acknowledged = set(acked)
    finally:
        stop.set()
        publisher.loop_stop()
    folder = node.events_root / node.node_id
    assert list(folder.glob("*.open")), "the active segment was left open by the kill"

    node.start()
    node.wait_for_log(r"landed segment \d+ that the previous run left open")
    after = client(node, "after-restart", mqtt.MQTTv311)
    after.publish("after/restart", b"1", qos=1).wait_for_publish(5)
    after.disconnect()
    after.loop_stop()
    node.stop()
    events = landed(node)
    recorded = [int(e.payload) for e in events if e.topic.startswith("load/")]
    assert acknowledged <= set(recorded), sorted(acknowledged - set(recorded))[:10]
    assert len(recorded) == len(set(recorded))
    sequences = [e.sequence for e in events]
    assert sequences == list(range(1, len(events) + 1))  # after the kill: no repeat, no gap
    assert events[-1].topic == "after/restart"


def test_a_wrong_setting_refuses_the_extension_and_names_it(
        hive_run: Callable[..., HiveNode]) -> None:
    node = hive_run("segment-max-age = soon\n")
    node.wait_for_log(r"segment-max-age = 'soon' is not a duration")
    node.wait_for_log(r"Started Hive")  # the node itself serves on
    assert not (node.events_root).exists()


def test_an_unwritable_folder_refuses_the_extension(hive_run: Callable[..., HiveNode],
                                                    tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    node = hive_run(f"folder = {blocker}/events\n")
    node.wait_for_log(r"folder .*a-file/events")


def test_the_recorded_count_is_a_counter_with_help_texts_in_prometheus(
        hive_run: Callable[..., HiveNode]) -> None:
    """``spark-events.recorded`` counts (a counter, ``_total``), names do not stutter
    (``events_events``), and each metric has a HELP text of its own."""
    rest = free_port()
    node = hive_run(body="<rest-api><enabled>true</enabled><listeners><http>"
                         f"<port>{rest}</port><bind-address>127.0.0.1</bind-address>"
                         "</http></listeners></rest-api>")
    publisher = client(node, "counted", mqtt.MQTTv311)
    for n in range(3):
        publisher.publish("count/me", str(n).encode(), qos=1).wait_for_publish(5)
    publisher.disconnect()
    with urllib.request.urlopen(f"http://127.0.0.1:{rest}/api/v1/metrics/prometheus",
                                timeout=5) as response:
        families = {f.name: f for f in text_string_to_metric_families(response.read().decode())}
    ours = {name: f for name, f in families.items()
            if name.startswith("hive_extension_spark_events_")}
    recorded = ours["hive_extension_spark_events_recorded"]
    assert recorded.type == "counter"
    assert [(s.name, s.value) for s in recorded.samples] == [
        ("hive_extension_spark_events_recorded_total", 3.0)]
    assert "hive_extension_spark_events_recovered" in ours
    assert not [name for name in ours if "events_events" in name]
    helps = [f.documentation for f in ours.values()]
    assert len(set(helps)) == len(helps) and not [h for h in helps if "extension metric" in h
                                                  and h.startswith("The extension metric")]
