"""Operating a node: the REST API (health, cluster members, metrics)."""

from hive_core.admin._http import HttpConnection, serve_http
from hive_core.admin._rest import API_PREFIX, RestApi, cluster_nodes, health, metrics

__all__ = ["API_PREFIX", "HttpConnection", "RestApi", "cluster_nodes", "health", "metrics",
           "serve_http"]
