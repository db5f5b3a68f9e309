"""Hive cluster discovery through Consul's service catalog.

Each node registers itself with its Consul agent as an instance of a service (id from the node
id, the address and port of its cluster transport) with a TTL check it keeps passing; at each
reload it reads the instances whose checks pass, and it deregisters when it leaves. A node that
dies stops passing its check and drops out. Settings come from ``consuldiscovery.properties``
(``$HIVE_CONSUL_DISCOVERY_CONFIG``, else the extension's data folder); see the README for every
key. Select it with ``<cluster><discovery><extension/>``.
"""

from __future__ import annotations

from hive_ext_consul import _config
from hive_ext_consul._agent import RECORD_VERSION, MalformedInstance, instance_from
from hive_ext_consul._config import *  # noqa: F403  (its __all__: the settings file's names)
from hive_ext_consul._discovery import NAME, ConsulDiscovery

__version__ = "1.0.0"

HIVE_API = ">=1.7,<2"  # 1.4: discovery_named; 1.7: PollingDiscovery, Properties

__all__ = ["HIVE_API", "NAME", "RECORD_VERSION", "ConsulDiscovery", "MalformedInstance",
           "create_plugin", "instance_from"]
__all__ += _config.__all__


def create_plugin() -> ConsulDiscovery:
    """The node's instance: Hive calls this once per node it loads the extension into."""
    return ConsulDiscovery()
