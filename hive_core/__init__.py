"""Hive: a clustered MQTT broker."""

__version__ = "0.1.0"
