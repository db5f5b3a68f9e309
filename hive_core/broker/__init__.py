"""One node's MQTT logic, independent of sockets and of the cluster."""

from hive_core.broker._broker import Broker, Metrics
from hive_core.broker._connection import ClientConnection, Transport
from hive_core.broker._message import Message
from hive_core.broker._session import Session
from hive_core.broker._settings import BrokerSettings

__all__ = ["Broker", "BrokerSettings", "ClientConnection", "Message", "Metrics", "Session",
           "Transport"]
