"""Helpers for testing Hive extensions: an in-process node, an MQTT test client, and the pytest
plugin's fixtures (``hive_node``, ``hive_node_factory``, ``hive_extensions``, ``mqtt_client``,
``hive_processes``, ``wait_until``, ``hive_metrics``), and ``free_port`` for test processes."""

from hive_core.testing._inprocess import RunningNode, start_node
from hive_core.testing._metrics import RecordingMetrics
from hive_core.testing._mqtt_client import MQTTV5, MQTTV311, MqttTestClient
from hive_core.testing._ports import free_port
from hive_core.testing._processes import HiveProcess, HiveProcesses, wait_until

__all__ = ["MQTTV5", "MQTTV311", "HiveProcess", "HiveProcesses", "MqttTestClient",
           "RecordingMetrics", "RunningNode", "free_port", "start_node", "wait_until"]
