"""<hivemq>, the root of config.xml."""

from __future__ import annotations

from pydantic_xml import element

from ._base import ConfigModel
from ._cluster import Cluster
from ._control_center import ControlCenter
from ._listeners import Listeners, default_listeners
from ._mqtt import Mqtt, Restrictions
from ._node import Extensions, OverloadProtection, Persistence
from ._rest_api import RestApi

__all__ = ["HiveConfig", "default_config"]


class HiveConfig(ConfigModel, tag="hivemq"):
    """The whole of config.xml; every section has its defaults when absent.

    Without <listeners> a node listens on 0.0.0.0:1883 (TCP); an empty <listeners/> means
    no MQTT listener at all.
    """

    listeners: Listeners = element(default_factory=default_listeners)
    """Where MQTT clients connect."""
    mqtt: Mqtt = element(default_factory=Mqtt)
    """MQTT protocol limits and features."""
    restrictions: Restrictions = element(default_factory=Restrictions)
    """Limits on connections and what they send."""
    overload_protection: OverloadProtection = element(default_factory=OverloadProtection)
    """Slowing the heaviest senders when the node has more work than it can do."""
    cluster: Cluster = element(default_factory=Cluster)
    """Several nodes as one broker."""
    persistence: Persistence = element(default_factory=Persistence)
    """Hive addition: how this node keeps sessions and retained messages."""
    extensions: Extensions = element(default_factory=Extensions)
    """Hive addition: which installed extensions not to load."""
    rest_api: RestApi = element(default_factory=RestApi)
    """The HTTP API operators and `hive cluster status` ask."""
    control_center: ControlCenter = element(default_factory=ControlCenter)
    """The web pages operators look at the cluster with."""


def default_config() -> HiveConfig:
    """One node: a TCP listener on 0.0.0.0:1883, cluster disabled, all else at defaults."""
    return HiveConfig()
