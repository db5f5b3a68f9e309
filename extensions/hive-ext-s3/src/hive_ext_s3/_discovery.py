"""S3 cluster discovery: the hooks, and what one node does with the bucket.

- ``hive_discovery_init``: write this node's record, then rewrite it every update-interval.
- ``hive_discovery_reload``: read every record under the prefix; delete the expired ones (dead
  nodes age out); rewrite this node's own when it is missing; answer the live addresses.
- ``hive_discovery_destroy``: stop rewriting and delete this node's record.

S3 failing never stops the node: the call is counted and logged (rate-limited) and the reload
answers ``None`` ("no news"), so the node keeps the members it has; the next reload retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from hive_ext_api import (
    CallFailed,
    ClusterNodeAddress,
    Counter,
    ExtensionContext,
    OutageLog,
    ServiceCalls,
    hookimpl,
)

from hive_ext_s3._bucket import BucketUnavailable, NodeBucket, s3_client
from hive_ext_s3._config import CONFIG_ENV, S3Settings, config_path, load_settings
from hive_ext_s3._record import MalformedRecord, NodeRecord, now_ms, parse_record

NAME = "s3-discovery"
T = TypeVar("T")


@dataclass(slots=True)
class Survey:
    """What one look at the bucket found (made on the S3 thread, reported on the loop)."""

    addresses: list[ClusterNodeAddress] = field(default_factory=list)
    expired: list[NodeRecord] = field(default_factory=list)
    malformed: dict[str, str] = field(default_factory=dict)  # key: why it was skipped
    own: NodeRecord | None = None  # this node's record, when the survey had to rewrite it


@dataclass(slots=True)
class Counters:
    errors: Counter | None = None
    expired: Counter | None = None
    malformed: Counter | None = None
    queries: Counter | None = None

    def inc(self, name: str, amount: int = 1) -> None:
        counter = getattr(self, name)
        if counter is not None and amount:
            counter.inc(amount)


class S3Discovery:
    """One node's S3 discovery (``create_plugin`` makes one per node)."""

    def __init__(self) -> None:
        self.log = logging.getLogger(f"hive.ext.{NAME}")
        self.settings: S3Settings | None = None
        self.bucket: NodeBucket | None = None
        self.calls: ServiceCalls | None = None
        self.counters = Counters()
        self.own: NodeRecord | None = None
        self.resolved = 0  # addresses the last successful reload answered
        self._refresher: asyncio.Task[None] | None = None
        self._malformed: dict[str, str] = {}  # keys already reported, so each is logged once

    # ---------------------------------------------------------------- lifecycle

    @hookimpl
    def hive_extension_start(self, context: ExtensionContext) -> None:
        self.log = context.log
        if not context.extension_discovery:
            self.log.info("%s: idle: %s", NAME, context.discovery_idle_reason())
            return
        path = config_path(context.data_dir)
        if not context.discovery_named and not path.exists() and not os.environ.get(CONFIG_ENV):
            # Several discovery extensions may be installed: one nobody set up stays out.
            self.log.info("%s: idle: no settings of its own (no %s); write them there (at "
                          "least s3-bucket-name) to use it", NAME, path)
            return
        settings = load_settings(path)  # ConfigError refuses
        client = s3_client(settings)
        self.start(settings, NodeBucket(client, settings.bucket_name, settings.file_prefix),
                   context.services.metrics if context.services is not None else None)

    def start(self, settings: S3Settings, bucket: NodeBucket, metrics: Any = None) -> None:
        """Use ``bucket`` as ``settings`` say; ``metrics`` is the node's registry, if any."""
        self.settings, self.bucket = settings, bucket
        if metrics is not None:
            self.counters = Counters(
                metrics.counter(f"{NAME}.errors", "calls to S3 that failed or timed out"),
                metrics.counter(f"{NAME}.records.expired", "dead nodes' records deleted"),
                metrics.counter(f"{NAME}.records.malformed", "objects under the prefix that "
                                "are not node records (each counted once)"),
                metrics.counter(f"{NAME}.queries", "reloads that read the bucket"))
            metrics.gauge(f"{NAME}.resolved-addresses", lambda: float(self.resolved),
                          "node addresses the last reload found")
        self.calls = ServiceCalls(OutageLog(self.log, NAME, self.counters.errors),
                                  expected=(BucketUnavailable,))
        where = settings.endpoint_url or f"AWS {settings.bucket_region}"
        self.log.info("%s: bucket %s at %s, prefix %r; records expire after %g s and are "
                      "rewritten every %g s (configuration: %s)", NAME, settings.bucket_name,
                      where, settings.file_prefix, settings.file_expiration_s,
                      settings.update_interval_s, settings.source)

    @hookimpl
    async def hive_extension_stop(self) -> None:
        await self._stop_refreshing()
        if self.calls is not None:
            self.calls.close()

    # ---------------------------------------------------------------- discovery hooks

    @hookimpl
    async def hive_discovery_init(self, own_address: ClusterNodeAddress,
                                  cluster_id: str) -> None:
        if self.bucket is None or self.settings is None:
            return
        self.own = NodeRecord.new(cluster_id, own_address.host, own_address.port)
        if await self._write_own("register this node in the bucket"):
            self.log.info("%s: registered this node as %s (%s:%d)", NAME,
                          self.bucket.key_of(cluster_id), own_address.host, own_address.port)
        if self.settings.update_interval_s > 0:
            self._refresher = asyncio.create_task(self._refresh_own(),
                                                  name=f"{NAME} record refresh")

    @hookimpl
    async def hive_discovery_reload(self) -> list[ClusterNodeAddress] | None:
        if self.bucket is None:
            return None
        try:
            survey = await self._call("read the node records", partial(self._survey, self.own))
        except CallFailed:
            return None  # no news: the node keeps the members it has
        self._report(survey)
        return survey.addresses

    @hookimpl
    async def hive_discovery_destroy(self) -> None:
        await self._stop_refreshing()
        own, bucket = self.own, self.bucket
        if own is None or bucket is None:
            return
        self.own = None
        key = bucket.key_of(own.node_id)
        with contextlib.suppress(CallFailed):
            await self._call("remove this node's record", partial(bucket.delete, key))
            self.log.info("%s: removed this node's record %s", NAME, key)

    # ---------------------------------------------------------------- the work

    async def _call(self, doing: str, call: Callable[[], T]) -> T:
        """``call()`` on the S3 thread; :class:`CallFailed` (counted and logged) when it failed."""
        assert self.calls is not None
        return await self.calls.run(doing, call)

    async def _write_own(self, doing: str) -> bool:
        own, bucket = self.own, self.bucket
        if own is None or bucket is None:
            return False
        record = own.refreshed()
        try:
            await self._call(doing, partial(bucket.put, record.node_id, record.encode()))
        except CallFailed:
            return False
        if self.own is not None:  # not destroyed meanwhile
            self.own = record
        return True

    async def _refresh_own(self) -> None:
        assert self.settings is not None
        while True:
            await asyncio.sleep(self.settings.update_interval_s)
            await self._write_own("update this node's record")

    async def _stop_refreshing(self) -> None:
        task, self._refresher = self._refresher, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _survey(self, own: NodeRecord | None) -> Survey:
        """Read every record; delete expired ones; rewrite this node's when it is missing.

        Runs on the S3 thread: it touches only the bucket and its arguments.
        """
        assert self.bucket is not None and self.settings is not None
        bucket, expiration = self.bucket, self.settings.file_expiration_s
        survey = Survey()
        addresses: dict[ClusterNodeAddress, None] = {}
        own_seen = False
        now = now_ms()
        for key in bucket.object_keys():
            body = bucket.read(key)
            if body is None:
                continue  # deleted since the listing
            try:
                record = parse_record(body)
            except MalformedRecord as exc:
                survey.malformed[key] = str(exc)
                continue
            mine = own is not None and record.node_id == own.node_id
            if record.expired(now, expiration):
                if not mine:  # this node is alive: its record is rewritten below instead
                    bucket.delete(key)
                    survey.expired.append(record)
                continue
            own_seen = own_seen or mine
            addresses[ClusterNodeAddress(record.host, record.port)] = None
        if own is not None and not own_seen:
            survey.own = own.refreshed()
            bucket.put(own.node_id, survey.own.encode())
            addresses[ClusterNodeAddress(own.host, own.port)] = None
        survey.addresses = list(addresses)
        return survey

    def _report(self, survey: Survey) -> None:
        """Count and log what a survey found (on the loop: metrics are not thread-safe)."""
        self.counters.inc("queries")
        self.resolved = len(survey.addresses)
        if survey.own is not None and self.own is not None:
            self.own = survey.own
            self.log.info("%s: this node's record was missing from the bucket: rewritten", NAME)
        for record in survey.expired:
            self.log.info("%s: node %s (%s:%d) has not updated its record for %.0f s: expired, "
                          "deleted", NAME, record.node_id, record.host, record.port,
                          (now_ms() - record.updated_ms) / 1000)
        self.counters.inc("expired", len(survey.expired))
        new = {key: why for key, why in survey.malformed.items() if self._malformed.get(key) != why}
        for key, why in new.items():
            self.log.warning("%s: skipping %s: not a node record (%s)", NAME, key, why)
        self.counters.inc("malformed", len(new))
        self._malformed = dict(survey.malformed)
