"""The public, stable API for Hive extensions.

Extensions import this package only, never ``hive_core``. An extension is a module with
``@hookimpl`` functions (see :mod:`hive_ext_api.hookspecs`), registered under the entry-point
group ``hive.extensions``, and a ``HIVE_API`` string naming the API versions it supports
(a PEP 440 specifier such as ``">=1.0,<2"``).
"""

from hive_ext_api import _persistence, hookspecs
from hive_ext_api._persistence import *  # noqa: F403 - the records and the store: its __all__
from hive_ext_api._polling import PollingDiscovery, Survey
from hive_ext_api._properties import (
    Properties,
    Setting,
    SettingError,
    parse_properties,
    read_properties,
    settings_file,
)
from hive_ext_api._service_calls import CallFailed, OutageLog, ServiceCalls
from hive_ext_api._services import Counter, ExtensionContext, HiveServices, MetricsRegistry
from hive_ext_api._types import (
    AuthDecision,
    AuthExchange,
    AuthStep,
    ClientInfo,
    ClusterMember,
    ClusterNodeAddress,
    ConnectInfo,
    ExtensionRefused,
    PublishMessage,
    ReasonCode,
    ReceivedPublish,
    RetainedInfo,
    SubscriptionInfo,
)
from hive_ext_api._version import API_VERSION, ENTRY_POINT_GROUP, PROJECT_NAME
from hive_ext_api.hookspecs import hookimpl

__all__ = [
    *_persistence.__all__,
    "API_VERSION",
    "ENTRY_POINT_GROUP",
    "PROJECT_NAME",
    "AuthDecision",
    "AuthExchange",
    "AuthStep",
    "CallFailed",
    "ClientInfo",
    "ClusterMember",
    "ClusterNodeAddress",
    "ConnectInfo",
    "Counter",
    "ExtensionContext",
    "ExtensionRefused",
    "HiveServices",
    "MetricsRegistry",
    "OutageLog",
    "PollingDiscovery",
    "Properties",
    "PublishMessage",
    "ReasonCode",
    "ReceivedPublish",
    "RetainedInfo",
    "ServiceCalls",
    "Setting",
    "SettingError",
    "SubscriptionInfo",
    "Survey",
    "hookimpl",
    "hookspecs",
    "parse_properties",
    "read_properties",
    "settings_file",
]
