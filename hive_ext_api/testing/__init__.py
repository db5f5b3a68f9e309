"""Tests every discovery extension on a shared service passes, written once, for its test suite.

It needs pytest and hive-broker's pytest plugin (installed with hive-broker: ``hive_node_factory``,
``hive_processes``, ``hive_metrics``, ``wait_until``). A test module of the extension subclasses
a contract and gives what is particular to its service (how to reach it, what it holds) as
fixtures and class attributes:

- :class:`DiscoveryContract`: inside real in-process nodes (registers and deregisters, an
  outage counted, a wrong setting refuses the extension and not the node, idle when not used);
- :class:`SettingsFileContract`: the settings file (where it is, a refusal names the setting,
  the README documents every key);
- :class:`DiscoveryHooksContract`: the hooks, the extension started by hand (every live node
  answered, foreign entries skipped, counted and logged once);
- :class:`OperatorContract`: three `hive run` nodes form a cluster, a killed one drops out and
  rejoins, and they ride out an outage of the service.

:func:`extension_fixtures` and :func:`service_fixtures` make the fixtures of an extension's
conftest: the extension alone in the nodes, asyncio for the async tests, and its service (a
:class:`Service`) started once for the session and running for each test.
"""

from __future__ import annotations

from hive_ext_api.testing._fixtures import Service, extension_fixtures, service_fixtures
from hive_ext_api.testing._hooks import A, B, DiscoveryHooksContract
from hive_ext_api.testing._node import DiscoveryContract, cluster_xml, free_port
from hive_ext_api.testing._operator import OperatorContract
from hive_ext_api.testing._settings import SettingsFileContract

__all__ = ["A", "B", "DiscoveryContract", "DiscoveryHooksContract", "OperatorContract", "Service",
           "SettingsFileContract", "cluster_xml", "extension_fixtures", "free_port",
           "service_fixtures"]
