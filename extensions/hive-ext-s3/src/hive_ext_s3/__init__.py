"""Hive cluster discovery through an S3 bucket (or any S3-compatible store).

Each node keeps one small record (format version, node id, cluster address, creation and update
time) under a prefix of a shared bucket, rewrites it every ``update-interval``, reads the others'
at each reload and deletes the ones that expired; it deletes its own when it leaves. Settings come
from ``s3discovery.properties`` (``$HIVE_S3_DISCOVERY_CONFIG``, else the extension's data folder);
see the README for every key. Select it with ``<cluster><discovery><extension/>``.
"""

from __future__ import annotations

from hive_ext_s3 import _config
from hive_ext_s3._config import *  # noqa: F403  (its __all__: the settings file's names)
from hive_ext_s3._discovery import NAME, S3Discovery
from hive_ext_s3._record import FORMAT_VERSION, MalformedRecord, NodeRecord, parse_record

__version__ = "1.0.0"

HIVE_API = ">=1.7,<2"  # 1.4: discovery_named; 1.7: PollingDiscovery, Properties

__all__ = ["FORMAT_VERSION", "HIVE_API", "NAME", "MalformedRecord", "NodeRecord", "S3Discovery",
           "create_plugin", "parse_record"]
__all__ += _config.__all__


def create_plugin() -> S3Discovery:
    """The node's instance: Hive calls this once per node it loads the extension into."""
    return S3Discovery()
