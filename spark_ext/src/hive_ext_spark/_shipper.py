"""Ships landed segments to ``s3://<bucket>/<prefix><node id>/`` in segment order (a thread).

A failed upload is logged (rate-limited), counted (``spark-events.s3-failures``) and retried
every ``s3-retry-interval``; the node never waits for S3. What was shipped is remembered in
``s3-shipped.json`` beside the segments, so a restarted node goes on where it stopped.
"""

from __future__ import annotations

import threading
from typing import Any

from hive_ext_spark._event_log import EventLog
from hive_ext_spark._files import read_json, write_json_atomically
from hive_ext_spark._settings import S3Settings

SHIPPED_FILE = "s3-shipped.json"


class S3Shipper:
    def __init__(self, event_log: EventLog, settings: S3Settings, client: Any) -> None:
        self.event_log = event_log
        self.settings = settings
        self.client = client
        self.prefix = f"{settings.prefix}{event_log.node_id}/"
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        state = read_json(event_log.folder / SHIPPED_FILE)
        same_place = (state.get("bucket"), state.get("prefix")) == (settings.bucket_name,
                                                                     self.prefix)
        shipped = state.get("segment", 0) if same_place else 0
        self.shipped_through = shipped if isinstance(shipped, int) else 0
        event_log.shipped_through = self.shipped_through

    def start(self) -> None:
        self.event_log.on_landed = self._wake.set
        self._thread = threading.Thread(target=self._run, name="hive-spark-s3", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Ship what is landed (within ``timeout``), then stop; the rest goes at the next start."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            shipped_all = self.ship_pending()
            if self._stop.is_set():
                return
            self._wake.wait(None if shipped_all else self.settings.retry_interval_s)
            self._wake.clear()

    def ship_pending(self) -> bool:
        """Upload every landed segment not yet in S3, oldest first; False after a failure."""
        for segment in self.event_log.landed():
            if segment.number <= self.shipped_through:
                continue
            try:
                body = segment.path.read_bytes()
            except FileNotFoundError:
                continue  # removed by retention first: counted as lost there
            key = f"{self.prefix}{segment.path.name}"
            try:
                self.client.put_object(Bucket=self.settings.bucket_name, Key=key, Body=body)
            except Exception as exc:  # boto3 raises many kinds; every one means "not shipped"
                self.event_log.counters.s3_failures.inc()
                self.event_log.warn.warning(
                    "spark-events: s3", "spark-events: cannot ship segment %d to s3://%s/%s: "
                    "%s; retrying every %g s", segment.number, self.settings.bucket_name, key,
                    exc, self.settings.retry_interval_s)
                return False
            self.shipped_through = segment.number
            write_json_atomically(self.event_log.folder / SHIPPED_FILE,
                                  {"bucket": self.settings.bucket_name, "prefix": self.prefix,
                                   "segment": segment.number})
            self.event_log.shipped_through = segment.number
            self.event_log.counters.s3_uploads.inc()
            if not self.settings.keep_local:
                segment.path.unlink(missing_ok=True)
                self.event_log.forget(segment)
        return True
