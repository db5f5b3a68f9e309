"""Retained messages: one per topic, kept in the store, expired when read past their time."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping

from hive_core.broker._message import Message
from hive_core.broker._records import Records, retained_from
from hive_core.mqtt import topic_matches
from hive_core.persistence import StoredMessage


class RetainedMessages(Mapping[str, Message]):
    """The node's retained messages by topic (read-only as a mapping; change with :meth:`apply`)."""

    def __init__(self, records: Records) -> None:
        self._records = records
        self._by_topic: dict[str, Message] = {}

    def __getitem__(self, topic: str) -> Message:
        return self._by_topic[topic]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_topic)

    def __len__(self) -> int:
        return len(self._by_topic)

    def restore(self, stored: Mapping[str, StoredMessage]) -> None:
        for topic, record in stored.items():
            self._by_topic[topic] = retained_from(record)

    def apply(self, message: Message, only_if_absent: bool = False) -> bool:
        """Set (payload) or clear (empty payload) the retained message of a topic.

        Returns True when the change was written to the store and is worth a commit before the
        publisher's acknowledgement (QoS 1/2).
        """
        topic = message.topic
        if only_if_absent and topic in self._by_topic:
            return False
        if not message.payload:
            if self._by_topic.pop(topic, None) is not None:
                self._records.delete_retained(topic)
                return message.qos > 0
            return False
        self._by_topic[topic] = message
        self._records.save_retained(message)
        return message.qos > 0

    def matching(self, topic_filter: str) -> list[Message]:
        """The live retained messages a new subscription on ``topic_filter`` gets."""
        if not self._by_topic:
            return []
        if "+" in topic_filter or "#" in topic_filter:
            candidates = list(self._by_topic.items())
        else:  # no wildcard: one lookup, not a scan of every retained message
            exact = self._by_topic.get(topic_filter)
            candidates = [(topic_filter, exact)] if exact is not None else []
        now = time.time()
        found = []
        for topic, message in candidates:
            if message.expired(now):
                del self._by_topic[topic]
                self._records.delete_retained(topic)
            elif topic_matches(topic_filter, topic):
                found.append(message)
        return found

    def live(self) -> list[Message]:
        """Every retained message that has not expired (what a joining node is sent)."""
        now = time.time()
        return [m for m in self._by_topic.values() if not m.expired(now)]
