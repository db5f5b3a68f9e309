"""Helpers for testing Hive extensions: an in-process node, an MQTT test client, and the pytest
plugin's fixtures (``hive_node``, ``hive_node_factory``, ``hive_extensions``, ``mqtt_client``)."""

from hive_core.testing._inprocess import RunningNode, start_node
from hive_core.testing._mqtt_client import MQTTV5, MQTTV311, MqttTestClient

__all__ = ["MQTTV5", "MQTTV311", "MqttTestClient", "RunningNode", "start_node"]
