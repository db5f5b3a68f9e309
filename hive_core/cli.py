"""The ``hive`` command."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from hive_core import __version__
from hive_core.admin import add_backups_command, add_cluster_command, add_rest_api_command
from hive_core.certs import add_certs_command
from hive_core.exit_codes import (
    FAILED,
    INTERRUPTED,
    MEANINGS,
    NOT_STARTED,
    TIMEOUT,
    UNREACHABLE,
    USAGE,
    epilog,
)
from hive_core.plugins import LOCAL_EXTENSION_FORMS

DEFAULT_CONFIG = Path("conf/config.xml")
DEFAULT_REST = "http://127.0.0.1:8888"


class _LogFormatter(logging.Formatter):
    """The node's log format, with the date and time part formatted once per second: a busy
    node logs a line per connect and disconnect (``hive.access``)."""

    _second: tuple[int, str] = (-1, "")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        second = int(record.created)
        if self._second[0] != second:
            self._second = (second, time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(second)))
        return f"{self._second[1]},{int(record.msecs):03d}"


def _configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(_LogFormatter("%(asctime)s %(levelname)-5s - %(message)s"))
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), handlers=[handler])
    # The format uses none of these: skip finding the caller's frame (the costliest part of a
    # record) and the thread and process lookups (the Logging HOWTO's "Optimization").
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging.logAsyncioTasks = False  # type: ignore[attr-defined,unused-ignore]  # 3.12+


def _run(args: argparse.Namespace) -> int:
    from hive_core.config import ConfigError, default_config, load_config
    from hive_core.net import TLSConfigError
    from hive_core.node import HiveNode, run_node
    from hive_core.plugins import LocalExtensionError, import_local_extension

    _configure_logging(args.log_level)
    log = logging.getLogger("hive")
    config_path: Path | None = args.config
    if config_path is None and DEFAULT_CONFIG.is_file():
        config_path = DEFAULT_CONFIG
    try:
        if config_path is None:
            log.info("No configuration file given: using the built-in default")
            config = default_config()
        else:
            log.info("Loading configuration from %s", config_path)
            config = load_config(config_path)
    except ConfigError as exc:
        print(f"hive: {exc}", file=sys.stderr)
        return USAGE
    try:
        local = [import_local_extension(target) for target in args.extension]
    except LocalExtensionError as exc:
        print(f"hive: --extension: {exc}", file=sys.stderr)
        return USAGE
    node = HiveNode(config, args.data_dir.resolve(), extra_extensions=local,
                    backup_dir=args.backup_dir.resolve() if args.backup_dir else None)
    try:
        run_node(node)
    except KeyboardInterrupt:  # SIGINT before the node's own handler was in place
        log.info("Interrupted while starting")
        return INTERRUPTED
    except TLSConfigError as exc:
        print(f"hive: TLS: {exc}", file=sys.stderr)
        return USAGE
    except ConfigError as exc:  # checked only as the node starts (extension names, environment)
        print(f"hive: {exc}", file=sys.stderr)
        return USAGE
    except OSError as exc:
        print(f"hive: cannot start: {exc}", file=sys.stderr)
        return UNREACHABLE
    return 0


def _extensions(args: argparse.Namespace) -> int:
    """List installed extensions: name, version, source, whether active, and why not."""
    from hive_core.config import ConfigError, load_config
    from hive_core.plugins import ExtensionManager
    from hive_ext_api import API_VERSION

    logging.basicConfig(level=logging.CRITICAL)
    disabled: tuple[str, ...] = ()
    config_path: Path | None = args.config
    if config_path is None and DEFAULT_CONFIG.is_file():
        config_path = DEFAULT_CONFIG
    if config_path is not None:
        try:
            disabled = load_config(config_path).extensions.disabled
        except ConfigError as exc:
            print(f"hive: {exc}", file=sys.stderr)
            return USAGE
    manager = ExtensionManager(disabled)
    if args.json:
        print(json.dumps({"hive": __version__, "extension_api": API_VERSION, "extensions": [
            {"name": r.name, "version": r.version or None, "source": r.source,
             "active": r.active, "reason": r.reason or None} for r in manager.records]},
            indent=2))
        return 0
    print(f"Hive {__version__}, extension API {API_VERSION}")
    rows = [("NAME", "VERSION", "ACTIVE", "SOURCE", "WHY NOT")]
    rows += [(r.name, r.version or "-", "yes" if r.active else "no", r.source, r.reason)
             for r in manager.records]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
              + "  " + row[4])
    return 0


def _config_reference(args: argparse.Namespace) -> int:
    """Write every element of config.xml, with its default, as Markdown."""
    from hive_core.config import reference_markdown

    text = reference_markdown()
    if args.out is None:
        sys.stdout.write(text)
        return 0
    try:
        args.out.write_text(text)
    except OSError as exc:
        print(f"hive: cannot write {args.out}: {exc}", file=sys.stderr)
        return FAILED
    print(f"hive: wrote {args.out}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """``hive`` and every subcommand."""
    parser = argparse.ArgumentParser(
        prog="hive", description="Hive, a clustered MQTT broker",
        epilog="Every command takes --help; those that print data take --json (one JSON "
               "document on standard output). "
               + epilog(UNREACHABLE, USAGE, FAILED, TIMEOUT, INTERRUPTED,
                        c1=f"{MEANINGS[UNREACHABLE]} (`hive run`: {NOT_STARTED})"))
    parser.add_argument("--version", action="version", version=f"hive {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = commands.add_parser(
        "run", help="start a node",
        epilog=epilog(UNREACHABLE, USAGE, INTERRUPTED, c0="stopped cleanly (SIGTERM, SIGINT)",
                      c1=NOT_STARTED))
    run.add_argument("--config", type=Path, default=None,
                     help=f"config.xml to use (default: {DEFAULT_CONFIG} if present, "
                          "else one node on TCP 1883)")
    run.add_argument("--data-dir", type=Path, default=Path("data"),
                     help="folder for the node's persistent data (default: ./data)")
    run.add_argument("--backup-dir", type=Path, default=None,
                     help="folder of the node's backups, one folder per backup id (default: "
                          "backup beside the data folder)")
    run.add_argument("--log-level", default="info",
                     choices=["debug", "info", "warning", "error"])
    run.add_argument("--extension", action="append", default=[], metavar="MODULE_OR_PATH",
                     help="also load this extension, not installed as a package: "
                          f"{LOCAL_EXTENSION_FORMS}; may be given several times")
    run.set_defaults(handler=_run)
    listing = commands.add_parser("extensions", help="list installed extensions",
                                  epilog=epilog(USAGE))
    listing.add_argument("--config", type=Path, default=None,
                         help="config.xml whose <extensions><disabled> to apply")
    listing.add_argument("--json", action="store_true",
                         help="print the versions and the extensions as one JSON document")
    listing.set_defaults(handler=_extensions)
    add_cluster_command(commands, DEFAULT_REST)
    add_backups_command(commands, DEFAULT_REST)
    add_certs_command(commands)
    add_rest_api_command(commands)
    config = commands.add_parser("config", help="about config.xml")
    config_commands = config.add_subparsers(dest="config_command", metavar="COMMAND")
    reference = config_commands.add_parser(
        "reference", help="every element of config.xml with its default, as Markdown "
                          "(the source of docs/configuration.md)",
        epilog=epilog(USAGE, FAILED, c3="--out could not be written"))
    reference.add_argument("--out", type=Path, default=None, metavar="FILE",
                           help="write it to FILE instead of standard output")
    reference.set_defaults(handler=_config_reference)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    incomplete = _missing_command(parser, args)
    if incomplete is not None:  # `hive`, `hive cluster`: what could follow, not an error line
        incomplete.print_help(sys.stderr)
        return 2
    return int(args.handler(args))


def _subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[Any] | None:
    actions = parser._subparsers._group_actions if parser._subparsers else []
    return next((a for a in actions if isinstance(a, argparse._SubParsersAction)), None)


def _missing_command(parser: argparse.ArgumentParser,
                     args: argparse.Namespace) -> argparse.ArgumentParser | None:
    """The parser whose command was left out (``hive``, ``hive cluster``), or None."""
    action = _subcommands(parser)
    if action is None:
        return None
    chosen = getattr(args, action.dest, None)
    if chosen is None:
        return parser
    return _missing_command(action.choices[chosen], args)


if __name__ == "__main__":
    sys.exit(main())
