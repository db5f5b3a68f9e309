"""hive-ext-spark: every PUBLISH a client sends to the node, recorded for Spark.

The broker side (this module) imports ``hive_ext_api`` only; it needs neither pyspark nor
pyarrow. Each PUBLISH the node accepts from a client is appended to the node's event log
(:mod:`hive_ext_spark._event_log`) by ``hive_publishes_received``, which the node calls with
each loop iteration's batch before anything those messages caused is written out (extension
API 1.9). The Spark side is :mod:`hive_ext_spark.stream` (``hive-spark stream``).

Settings: ``spark.properties`` (see :mod:`hive_ext_spark._settings` and the README).
"""

from __future__ import annotations

from hive_ext_api import ExtensionContext, ExtensionRefused, ReceivedPublish, hookimpl

from hive_ext_spark._deps import MissingDependency
from hive_ext_spark._event_log import EventLog
from hive_ext_spark._s3 import s3_client
from hive_ext_spark._segment import Event, read_segment
from hive_ext_spark._settings import Settings, SettingsError, load_settings
from hive_ext_spark._shipper import S3Shipper

__version__ = "1.1.0"

HIVE_API = ">=1.9,<2"

__all__ = ["HIVE_API", "Event", "EventLog", "Settings", "SettingsError", "load_settings",
           "read_segment"]

_log: EventLog | None = None
_shipper: S3Shipper | None = None


def _node_id(context: ExtensionContext, settings: Settings) -> str:
    # HiveServices does not declare node_id yet; the node's implementation has it.
    node_id = settings.node_id or str(getattr(context.services, "node_id", "") or "")
    if not node_id:
        raise ExtensionRefused(f"{settings.source}: this node does not tell its id to "
                               "extensions: set node-id")
    return node_id


@hookimpl
def hive_extension_start(context: ExtensionContext) -> None:
    global _log, _shipper
    try:
        settings = load_settings(context.data_dir)
    except SettingsError as exc:
        raise ExtensionRefused(str(exc)) from None
    node_id = _node_id(context, settings)
    client = None
    if settings.s3 is not None:
        s3 = settings.s3
        try:
            client = s3_client(region=s3.bucket_region, endpoint_url=s3.endpoint_url,
                               path_style=s3.path_style_access, access_key_id=s3.access_key_id,
                               secret_access_key=s3.secret_access_key,
                               needed_for=f"{settings.source}: s3-bucket-name")
        except MissingDependency as exc:
            raise ExtensionRefused(str(exc)) from None
    metrics = context.services.metrics if context.services is not None else None
    event_log = EventLog(settings.folder, node_id, segment_max_bytes=settings.segment_max_bytes,
                         segment_max_age_s=settings.segment_max_age_s,
                         retention_max_bytes=settings.retention_max_bytes, metrics=metrics,
                         logger=context.log)
    try:
        event_log.open()
    except OSError as exc:
        raise ExtensionRefused(f"{settings.source}: folder {settings.folder}: {exc}") from None
    if metrics is not None:
        metrics.gauge("spark-events.backlog-bytes", lambda: float(event_log.backlog_bytes()),
                      "landed segments the Spark job (or S3) has not taken yet")
    _log = event_log
    if settings.s3 is not None:
        _shipper = S3Shipper(event_log, settings.s3, client)
        _shipper.start()
    where = f", shipped to s3://{settings.s3.bucket_name}/{settings.s3.prefix}" \
        if settings.s3 is not None else ""
    context.log.info("spark-events: recording every inbound PUBLISH of node %s in %s "
                     "(segments of %d bytes or %g s, %d bytes kept%s; settings: %s)", node_id,
                     event_log.folder, settings.segment_max_bytes, settings.segment_max_age_s,
                     settings.retention_max_bytes, where, settings.source)


@hookimpl
def hive_extension_stop(context: ExtensionContext) -> None:
    global _log, _shipper
    if _log is not None:
        _log.close()
    if _shipper is not None:
        _shipper.stop()
    _log = _shipper = None
    context.log.info("spark-events: stopped")


@hookimpl
def hive_publishes_received(publishes: list[ReceivedPublish]) -> None:
    event_log = _log
    if event_log is not None:
        event_log.append_received(publishes)
