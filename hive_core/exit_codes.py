"""The exit codes of every ``hive`` subcommand (the README's table, under "The `hive` command"),
and the ``--help`` epilog that says which of them a subcommand uses."""

from __future__ import annotations

__all__ = ["FAILED", "INTERRUPTED", "MEANINGS", "NOT_STARTED", "OK", "TIMEOUT", "UNREACHABLE",
           "USAGE", "epilog"]

OK = 0
UNREACHABLE = 1
USAGE = 2
FAILED = 3
TIMEOUT = 4
INTERRUPTED = 130

MEANINGS = {
    OK: "done",
    UNREACHABLE: "the node's REST API could not be reached or refused the request",
    USAGE: "a usage error: bad arguments, or a configuration or input that cannot be used",
    FAILED: "the operation ran and failed (its reason on standard error)",
    TIMEOUT: "still running when --timeout passed (it goes on)",
    INTERRUPTED: "interrupted (Ctrl-C)",
}
NOT_STARTED = "the node could not start: a port or file it needs is not available"
"""What exit 1 means for ``hive run``."""


def epilog(*codes: int, **said: str) -> str:
    """``exit codes: 0 done; 1 ...`` for a ``--help``; ``said`` rewords a code for one
    subcommand (keyword ``c3="..."`` for code 3)."""
    words = [f"{code} {said.get(f'c{code}', MEANINGS[code])}" for code in (OK, *codes)]
    return "exit codes: " + "; ".join(words) + "."
