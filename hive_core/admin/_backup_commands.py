"""`hive backups create|list|status ID|import ID`: a running node's backups, over its REST API.

Exit codes: 0 done (the backup or import completed; a list or a state shown), 1 the REST API
could not be reached or refused the request (unauthorized, no such backup, one already
running), 2 a usage error, 3 the backup or import failed (its reason on standard error),
4 still running when --timeout passed (it goes on; ``hive backups status ID`` follows it).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from hive_core.admin._commands import RestRefused, add_credential_options, rest_json
from hive_core.exit_codes import USAGE, epilog

__all__ = ["add_backups_command"]

PATH = "/api/v1/management/backups"
DONE, FAILED = ("COMPLETED", "RESTORE_COMPLETED"), ("FAILED", "RESTORE_FAILED")
EXIT_UNREACHABLE, EXIT_FAILED, EXIT_TIMEOUT = 1, 3, 4


def _call(args: argparse.Namespace, path: str, method: str = "GET") -> Any:
    return rest_json(args.rest, path, args.user, args.cacert, 10.0, method)


def _progress(backup: dict[str, Any]) -> str:
    restore = backup.get("restore")
    if backup["state"] == "RESTORE_IN_PROGRESS" and restore:
        total = restore.get("records_total") or "?"
        return (f"{backup['id']}: {backup['state']} {restore['records_read']}/{total} records, "
                f"{restore['sessions_imported']} sessions imported")
    return f"{backup['id']}: {backup['state']}"


def _summary(backup: dict[str, Any]) -> str:
    lines = [f"Backup {backup['id']}: {backup['state']}"]
    if backup.get("reason"):
        lines.append(f"  reason: {backup['reason']}")
    lines.append(f"  created: {backup['created']}")
    if backup.get("file"):
        lines.append(f"  file: {backup['file']} ({backup.get('bytes')} bytes)")
    counts = backup.get("counts")
    if counts:
        lines.append(f"  holds: {counts['clients']} sessions, {counts['queued']} queued "
                     f"messages, {counts['retained']} retained messages")
    restore = backup.get("restore")
    if restore:
        lines.append(f"  imported: {restore['sessions_imported']} sessions "
                     f"({restore['queued_imported']} queued messages), "
                     f"{restore['retained_imported']} retained messages")
        lines.append(f"  kept as the cluster had them: {restore['sessions_existing']} sessions, "
                     f"{restore['retained_existing']} retained messages")
        lines.append(f"  expired, skipped: {restore['sessions_expired']} sessions, "
                     f"{restore['queued_expired']} queued messages, "
                     f"{restore['retained_expired']} retained messages")
    if backup.get("seconds") is not None:
        lines.append(f"  took: {backup['seconds']} s")
    return "\n".join(lines)


def _finish(args: argparse.Namespace, backup: dict[str, Any]) -> int:
    if args.json:
        print(json.dumps(backup, indent=2))
    else:
        print(_summary(backup))
    if backup["state"] in FAILED:
        print(f"hive: backup {backup['id']}: {backup['state']}: {backup.get('reason')}",
              file=sys.stderr)
        return EXIT_FAILED
    return 0


def _wait(args: argparse.Namespace, backup: dict[str, Any]) -> int:
    """Poll the backup until it is over, showing its progress on standard error."""
    deadline = time.monotonic() + args.timeout
    shown = ""
    while True:
        line = _progress(backup)
        if line != shown and not args.json:
            print(line, file=sys.stderr, flush=True)
            shown = line
        if backup["state"] in DONE or backup["state"] in FAILED:
            return _finish(args, backup)
        if time.monotonic() > deadline:
            print(f"hive: backup {backup['id']} is still {backup['state']} after "
                  f"{args.timeout:g} s; follow it with: hive backups status {backup['id']}",
                  file=sys.stderr)
            if args.json:
                print(json.dumps(backup, indent=2))
            return EXIT_TIMEOUT
        time.sleep(args.interval)
        backup = _call(args, f"{PATH}/{backup['id']}")["backup"]


def _create(args: argparse.Namespace) -> int:
    return _wait(args, _call(args, PATH, "POST")["backup"])


def _import(args: argparse.Namespace) -> int:
    return _wait(args, _call(args, f"{PATH}/{args.id}", "POST")["backup"])


def _status(args: argparse.Namespace) -> int:
    return _finish(args, _call(args, f"{PATH}/{args.id}")["backup"])


def _list(args: argparse.Namespace) -> int:
    items = _call(args, PATH)["items"]
    if args.json:
        print(json.dumps(items, indent=2))
        return 0
    rows = [("ID", "STATE", "CREATED", "BYTES", "SESSIONS", "RETAINED")]
    for item in items:
        counts = item.get("counts") or {}
        rows.append((item["id"], item["state"], item["created"], str(item.get("bytes") or "-"),
                     str(counts.get("clients", "-")), str(counts.get("retained", "-"))))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
              .rstrip())
    return 0


def _guarded(handler: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            return int(handler(args))
        except RestRefused as exc:
            print(f"hive: {exc}", file=sys.stderr)
            return EXIT_UNREACHABLE
    return run


def add_backups_command(commands: argparse._SubParsersAction[Any], default_rest: str) -> None:
    """Add ``hive backups create|list|status|import`` to ``commands``."""
    backups = commands.add_parser(
        "backups", help="make, list and import a running node's backups",
        description=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawTextHelpFormatter)
    actions = backups.add_subparsers(dest="backups_command", metavar="COMMAND")
    chosen = {
        "create": ("back up the node's sessions and retained messages; wait until written",
                   _create),
        "list": ("the backups the node knows (made, imported, or placed in its folder)", _list),
        "status": ("the state of one backup or import", _status),
        "import": ("import backup/<ID>/*.backup into the running node; wait until done",
                   _import)}
    for name, (help_text, handler) in chosen.items():
        codes = {"create": (EXIT_UNREACHABLE, USAGE, EXIT_FAILED, EXIT_TIMEOUT),
                 "import": (EXIT_UNREACHABLE, USAGE, EXIT_FAILED, EXIT_TIMEOUT),
                 "status": (EXIT_UNREACHABLE, USAGE, EXIT_FAILED)}.get(name,
                                                                     (EXIT_UNREACHABLE, USAGE))
        command = actions.add_parser(name, help=help_text, epilog=epilog(*codes))
        if name in ("status", "import"):
            command.add_argument("id", metavar="ID", help="the backup's id (its folder's name)")
        command.add_argument("--rest", default=default_rest, metavar="URL",
                             help=f"the node's REST API (default: {default_rest})")
        command.add_argument("--json", action="store_true",
                             help="print the backup (or the list) as JSON")
        if name in ("create", "import"):
            command.add_argument("--timeout", type=float, default=3600.0, metavar="SECONDS",
                                 help="how long to wait for the end (default: 3600; exit 4 "
                                      "when it is still running)")
            command.add_argument("--interval", type=float, default=0.5, metavar="SECONDS",
                                 help="how often to ask for its progress (default: 0.5)")
        add_credential_options(command)
        command.set_defaults(handler=_guarded(handler))
