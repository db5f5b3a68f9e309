"""A device that publishes a temperature reading every second, and a subscriber that prints them.

Both talk MQTT to any broker, ``hive run`` for one: ``hive-device-publisher`` and
``hive-device-subscriber`` (``--help`` for their options).
"""

__version__ = "1.0.0"
