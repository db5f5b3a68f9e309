"""S3 cluster discovery: what one node does with the bucket.

- register (``hive_discovery_init``): write this node's record; then rewrite it every
  update-interval.
- survey (``hive_discovery_reload``): read every record under the prefix; delete the expired ones
  (dead nodes age out); rewrite this node's own when it is missing; answer the live addresses.
- deregister (``hive_discovery_destroy``): delete this node's record.

:class:`PollingDiscovery` does the rest: idle unless set up, the calls off the loop and bounded,
S3 failing counted and logged once per outage while the reload answers "no news", the metrics.
"""

from __future__ import annotations

from pathlib import Path

from hive_ext_api import ClusterNodeAddress, ExtensionContext, PollingDiscovery, Survey

from hive_ext_s3._bucket import BucketUnavailable, NodeBucket, s3_client
from hive_ext_s3._config import CONFIG_ENV, CONFIG_FILE_NAME, S3Settings, load_settings
from hive_ext_s3._record import MalformedRecord, NodeRecord, now_ms, parse_record

NAME = "s3-discovery"


class S3Discovery(PollingDiscovery[S3Settings, NodeBucket, NodeRecord]):
    """One node's S3 discovery (``create_plugin`` makes one per node)."""

    NAME = NAME
    SERVICE = "S3"
    UNAVAILABLE = (BucketUnavailable,)
    CONFIG_ENV = CONFIG_ENV
    CONFIG_FILE_NAME = CONFIG_FILE_NAME
    IDLE_HINT = "write them there (at least s3-bucket-name) to use it"
    QUERIES = "reloads that read the bucket"
    MALFORMED = ("records.malformed", "objects under the prefix that are not node records "
                 "(each counted once)")
    COUNTERS = (("records.expired", "dead nodes' records deleted"),)
    REGISTER = "register this node in the bucket"
    REFRESH = "update this node's record"
    SURVEY = "read the node records"
    DEREGISTER = "remove this node's record"

    def configure(self, context: ExtensionContext, path: Path) -> tuple[S3Settings, NodeBucket]:
        settings = load_settings(path)  # ConfigError refuses
        return settings, NodeBucket(s3_client(settings), settings.bucket_name,
                                    settings.file_prefix)

    def describe(self, settings: S3Settings) -> str:
        where = settings.endpoint_url or f"AWS {settings.bucket_region}"
        return (f"bucket {settings.bucket_name} at {where}, prefix {settings.file_prefix!r}; "
                f"records expire after {settings.file_expiration_s:g} s and are rewritten every "
                f"{settings.update_interval_s:g} s (configuration: {settings.source})")

    def refresh_interval(self, settings: S3Settings) -> float:
        return settings.update_interval_s

    def own_entry(self, node_id: str, address: ClusterNodeAddress) -> NodeRecord:
        return NodeRecord.new(node_id, address.host, address.port)

    def register(self, own: NodeRecord) -> str:
        assert self.client is not None
        self.client.put(own.node_id, own.encode())  # created and updated at once
        return self.client.key_of(own.node_id)

    def refresh(self, own: NodeRecord) -> None:
        assert self.client is not None
        self.client.put(own.node_id, own.refreshed().encode())

    def deregister(self, own: NodeRecord) -> str:
        assert self.client is not None
        key = self.client.key_of(own.node_id)
        self.client.delete(key)
        return f"removed this node's record {key}"

    def malformed_line(self, entry: str, why: str) -> str:
        return f"skipping {entry}: not a node record ({why})"

    def survey(self, own: NodeRecord | None) -> Survey:
        """Read every record; delete expired ones; rewrite this node's when it is missing."""
        assert self.client is not None and self.settings is not None
        bucket, expiration = self.client, self.settings.file_expiration_s
        survey = Survey()
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
                    survey.count("records.expired")
                    survey.notes.append(
                        f"node {record.node_id} ({record.host}:{record.port}) has not updated "
                        f"its record for {(now - record.updated_ms) / 1000:.0f} s: expired, "
                        "deleted")
                continue
            own_seen = own_seen or mine
            survey.found(record.host, record.port)
        if own is not None and not own_seen:
            self.refresh(own)
            survey.notes.append("this node's record was missing from the bucket: rewritten")
            survey.found(own.host, own.port)
        return survey
