"""Operating a node: the REST API (health, cluster members, metrics, backups), who may call
it, and the web control center."""

from hive_core.admin._auth import Access, AuthStats, Gatekeeper
from hive_core.admin._backup_commands import add_backups_command
from hive_core.admin._backups import Backups, BackupState
from hive_core.admin._commands import (
    TOKEN_VARIABLE,
    add_credential_options,
    add_rest_api_command,
    rest_request,
)
from hive_core.admin._control_center import ControlCenter, ControlCenterNode
from hive_core.admin._http import Action, HttpConnection, Reply, Request, Routes, serve_http
from hive_core.admin._overview import add_cluster_command, cluster_overview, overview_table
from hive_core.admin._passwords import hash_password, new_token, verify_password
from hive_core.admin._rest import API_PREFIX, RestApi, cluster_nodes, health, metrics

__all__ = ["API_PREFIX", "TOKEN_VARIABLE", "Access", "Action", "AuthStats", "BackupState",
           "Backups", "ControlCenter", "ControlCenterNode", "Gatekeeper", "HttpConnection",
           "Reply", "Request", "RestApi", "Routes", "add_backups_command", "add_cluster_command",
           "add_credential_options", "add_rest_api_command", "cluster_nodes", "cluster_overview",
           "hash_password", "health", "metrics", "new_token", "overview_table", "rest_request",
           "serve_http", "verify_password"]
