"""`hive cluster status`: the members a running node sees, each with its client connections,
message rates and replication, as a terminal table or (``--json``) one JSON document.

The node asked first (the first --rest) gives the member list; every node asked (each --rest)
gives its own numbers from /api/v1/metrics, read twice --sample seconds apart for the rates.
A member no --rest points at shows what the cluster's heartbeats carried of it to the node
asked first (connections, sessions, and message rates over the last heartbeat interval); its
backups and lag only its own REST API tells ("-").
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from hive_core.admin._commands import RestRefused, add_credential_options, rest_json
from hive_core.exit_codes import OK, UNREACHABLE, USAGE, epilog

__all__ = ["add_cluster_command", "cluster_overview", "overview_table"]

WIDTH = 100
"""The table fits a terminal this wide: long cells are cut, ending in "~"."""
COLUMNS = ("NODE", "STATE", "VERSION", "ADDRESS", "CONN", "IN/S", "OUT/S", "BACKUPS", "LAG")
ELASTIC = ("BACKUPS", "ADDRESS", "NODE")  # cut first when a row is too wide, in this order
NUMBERS = {COLUMNS.index(name) for name in ("CONN", "IN/S", "OUT/S", "LAG")}  # right-aligned


def _get(base: str, path: str, args: argparse.Namespace) -> Any:
    return rest_json(base, path, args.user, args.cacert, args.timeout)


def _sample(urls: list[str], args: argparse.Namespace,
            failed: dict[str, str]) -> dict[str, tuple[float, dict[str, Any]]]:
    """Each reachable node's metrics document and when it came, by REST URL."""
    samples: dict[str, tuple[float, dict[str, Any]]] = {}
    for url in urls:
        if url in failed:
            continue
        try:
            document = _get(url, "/api/v1/metrics", args)
        except RestRefused as exc:
            failed[url] = str(exc)
            continue
        samples[url] = (time.monotonic(), document)
    return samples


def _rate(field: str, first: tuple[float, dict[str, Any]],
          second: tuple[float, dict[str, Any]] | None) -> float | None:
    if second is None or "broker" not in first[1] or "broker" not in second[1]:
        return None
    seconds = second[0] - first[0]
    count = second[1]["broker"][field] - first[1]["broker"][field]
    # a node that restarted between the two readings counts from 0 again: no rate
    return round(count / seconds, 1) if seconds > 0 and count >= 0 else None


def _numbers(url: str, first: tuple[float, dict[str, Any]],
             second: tuple[float, dict[str, Any]] | None) -> dict[str, Any]:
    document = (second or first)[1]
    broker = document.get("broker") or {}
    cluster = document.get("cluster")
    return {
        "rest": url,
        "connections": broker.get("connections_current"),
        "sessions": broker.get("sessions"),
        "messages_in_per_second": _rate("messages_in", first, second),
        "messages_out_per_second": _rate("messages_out", first, second),
        "backups": list(cluster["backups"]) if cluster else [],
        "replication_lag": dict(cluster["replication_lag"]) if cluster else {},
    }


def cluster_overview(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, str]]:
    """The overview document, and why each --rest URL that failed did (empty: none did).

    Raises RestRefused when the first node (the one whose member list it shows) cannot be asked.
    """
    urls: list[str] = args.rest
    members = _get(urls[0], "/api/v1/cluster/nodes", args)
    try:
        items = list(members["items"])
        asked_id = next(str(m["id"]) for m in items if m.get("this_node"))
    except (KeyError, TypeError, StopIteration) as exc:
        raise RestRefused(f"{urls[0]} did not answer with a member list: {exc!r}") from exc
    failed: dict[str, str] = {}
    first = _sample(urls, args, failed)
    second: dict[str, tuple[float, dict[str, Any]]] = {}
    if args.sample > 0:
        time.sleep(args.sample)
        second = _sample(list(first), args, failed)
    by_id = {str(sample[1].get("node_id")): url for url, sample in first.items()}
    nodes = []
    for member in items:
        node_id = str(member["id"])
        address = None if member.get("address") is None else \
            f"{member['address']}:{member['port']}"
        row: dict[str, Any] = {"id": node_id, "state": member["state"],
                               "version": member.get("version"), "address": address,
                               "this_node": bool(member.get("this_node"))}
        url = by_id.get(node_id)
        if url is not None and url not in failed:
            row.update(_numbers(url, first[url], second.get(url)))
        else:
            load = member.get("load") or {}
            row.update({"rest": None, "connections": load.get("connections"),
                        "sessions": load.get("sessions"),
                        "messages_in_per_second": load.get("messages_in_per_second"),
                        "messages_out_per_second": load.get("messages_out_per_second"),
                        "backups": None, "replication_lag": None})
        nodes.append(row)
    seen = {str(m["id"]) for m in items}
    for node_id, url in by_id.items():
        if node_id not in seen:
            failed[url] = f"{url} is node {node_id}, which {asked_id} does not see as a member"
    document = {"node_id": asked_id, "size": len(items),
                "rate_seconds": args.sample if args.sample > 0 else None, "nodes": nodes}
    return document, failed


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}" if value < 100 else f"{value:.0f}"
    return str(value)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "~"


def overview_table(document: dict[str, Any]) -> str:
    """The overview as lines of at most WIDTH characters."""
    rows = [COLUMNS]
    for node in document["nodes"]:
        lag = node["replication_lag"]
        rows.append((
            node["id"] + ("*" if node["this_node"] else ""), node["state"],
            _cell(node["version"]), _cell(node["address"]), _cell(node["connections"]),
            _cell(node["messages_in_per_second"]), _cell(node["messages_out_per_second"]),
            "-" if node["backups"] is None else ",".join(node["backups"]) or "none",
            "-" if lag is None else str(max(lag.values(), default=0))))
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    while sum(widths) + 2 * (len(widths) - 1) > WIDTH:
        index = max((COLUMNS.index(name) for name in ELASTIC), key=lambda i: widths[i])
        if widths[index] <= 8:
            break
        widths[index] -= 1
    seconds = document["rate_seconds"]
    lines = [f"Cluster size: {document['size']}, as node {document['node_id']} (*) sees it"
             + (f"; rates over {seconds:g} s" if seconds else "")]
    for row in rows:
        lines.append("  ".join(
            _cut(cell, width).rjust(width) if index in NUMBERS else _cut(cell, width).ljust(width)
            for index, (cell, width) in enumerate(zip(row, widths, strict=True))).rstrip())
    if any(node["rest"] is None for node in document["nodes"]):
        lines.append("not asked (no --rest): load as the heartbeats carry it; backups, lag: -")
    return "\n".join(lines)


def _status(args: argparse.Namespace) -> int:
    if args.rest is None:
        args.rest = [args.default_rest]
    if args.sample < 0:
        print("hive: --sample must be 0 or more", file=sys.stderr)
        return USAGE
    try:
        document, failed = cluster_overview(args)
    except RestRefused as exc:
        print(f"hive: {exc}", file=sys.stderr)
        return UNREACHABLE
    print(json.dumps(document, indent=2) if args.json else overview_table(document))
    for reason in failed.values():
        print(f"hive: {reason}", file=sys.stderr)
    return UNREACHABLE if failed else OK


def add_cluster_command(commands: argparse._SubParsersAction[Any], default_rest: str) -> None:
    """Add ``hive cluster status`` to ``commands``."""
    cluster = commands.add_parser("cluster", help="ask a running node about its cluster")
    actions = cluster.add_subparsers(dest="cluster_command", metavar="COMMAND")
    status = actions.add_parser(
        "status", help="the members a running node sees: id, state, version, address, "
                       "connections, message rates, replication",
        description=__doc__.split("\n\n", 1)[1],
        epilog=epilog(UNREACHABLE, USAGE, c1="a node asked could not be reached or refused "
                                             "the request (the table shows what came)"))
    status.add_argument("--rest", action="append", default=None, metavar="URL",
                        help=f"a node's REST API (default: {default_rest}); may be given once "
                             "per node, the first one's member list is shown")
    status.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS",
                        help="how long to wait for each answer (default: 5)")
    status.add_argument("--sample", type=float, default=1.0, metavar="SECONDS",
                        help="read the counters twice, this far apart, for the message rates "
                             "(default: 1; 0: no rates)")
    status.add_argument("--json", action="store_true",
                        help="print the overview as one JSON document")
    add_credential_options(status)
    status.set_defaults(handler=_status, default_rest=default_rest)
