"""`hive rest-api ...` (make a password hash or a token) and the credentials a command that
calls the REST API sends (``hive cluster status``)."""

from __future__ import annotations

import argparse
import base64
import getpass
import json
import os
import ssl
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from hive_core.admin._passwords import ALGORITHMS, hash_password, new_token
from hive_core.exit_codes import USAGE, epilog

__all__ = ["TOKEN_VARIABLE", "add_credential_options", "add_rest_api_command", "rest_request"]

TOKEN_VARIABLE = "HIVE_REST_TOKEN"
PASSWORD_VARIABLE = "HIVE_REST_PASSWORD"


def _read_password(from_stdin: bool) -> str:
    if from_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    password = getpass.getpass("Password: ")
    if getpass.getpass("Again: ") != password:
        print("hive: the passwords differ", file=sys.stderr)
        raise SystemExit(USAGE)
    return password


def _hash_password(args: argparse.Namespace) -> int:
    """Print the hash of a password read from a prompt or standard input."""
    password = _read_password(args.password_stdin)
    if not password:
        print("hive: the password is empty", file=sys.stderr)
        return USAGE
    hashed = str(hash_password(password, args.algorithm))
    print(json.dumps({"algorithm": args.algorithm, "password_hash": hashed}) if args.json
          else hashed)
    return 0


def _new_token(args: argparse.Namespace) -> int:
    token = new_token()
    print(json.dumps({"token": token}) if args.json else token)
    return 0


def add_rest_api_command(commands: argparse._SubParsersAction[Any]) -> None:
    """Add ``hive rest-api hash-password`` and ``hive rest-api new-token`` to ``commands``."""
    rest_api = commands.add_parser("rest-api", help="credentials for the REST API's <auth>")
    actions = rest_api.add_subparsers(dest="rest_api_command", metavar="COMMAND")
    hashing = actions.add_parser(
        "hash-password", help="print the hash of a password, for <user><password-hash>",
        epilog=epilog(USAGE, c2="a usage error, or an empty password or two that differ"))
    hashing.add_argument("--password-stdin", action="store_true",
                         help="read the password from the first line of standard input "
                              "(default: prompt twice)")
    hashing.add_argument("--algorithm", choices=ALGORITHMS, default="scrypt",
                         help="scrypt (default) or pbkdf2-sha256 (where FIPS rules ask for it)")
    hashing.add_argument("--json", action="store_true",
                         help='print {"algorithm": ..., "password_hash": ...}')
    hashing.set_defaults(handler=_hash_password)
    token = actions.add_parser("new-token", help="print a random token, for <tokens><token>",
                               epilog=epilog(USAGE))
    token.add_argument("--json", action="store_true", help='print {"token": ...}')
    token.set_defaults(handler=_new_token)


def add_credential_options(parser: argparse.ArgumentParser) -> None:
    """``--user`` and ``--cacert`` for a command that calls the REST API."""
    parser.add_argument("--user", default=None, metavar="NAME",
                        help=f"HTTP Basic user; the password from ${PASSWORD_VARIABLE}, else a "
                             f"prompt (a bearer token comes from ${TOKEN_VARIABLE} instead)")
    parser.add_argument("--cacert", type=Path, default=None, metavar="FILE",
                        help="PEM file of the CA that signed an https REST API's certificate "
                             "(default: the system's CAs)")


class RestRefused(Exception):
    """The REST API could not be reached or did not answer as asked; the message says why
    (exit 1)."""


def rest_json(base: str, path: str, user: str | None, cacert: Path | None,
              timeout: float = 10.0, method: str = "GET") -> Any:
    """The JSON a node's REST API answers to ``method`` on ``base`` + ``path`` (a POST sends
    an empty body). Raises :class:`RestRefused` naming the URL and why, with a hint when
    credentials are missing."""
    url = base.rstrip("/") + path
    try:
        request, context = rest_request(url, user, cacert)
        request.method = method
        if method == "POST":
            request.data = b""
            request.add_header("Content-Type", "application/json")  # the API refuses forms
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return json.load(response)
    except urllib.error.HTTPError as exc:
        hint = f" (give --user, or set ${TOKEN_VARIABLE})" if exc.code == 401 else ""
        try:
            detail = json.load(exc).get("detail", "")
        except (ValueError, AttributeError):
            detail = ""
        raise RestRefused(f"{method} {url} answered {exc.code} {exc.reason}{hint}"
                          f"{': ' + detail if detail else ''}") from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise RestRefused(f"cannot reach the REST API at {base}: {reason} "
                          "(is <rest-api> enabled on that node?)") from exc
    except ValueError as exc:
        raise RestRefused(f"{url} did not answer with JSON: {exc}") from exc


def rest_request(url: str, user: str | None, cacert: Path | None,
                 ) -> tuple[urllib.request.Request, ssl.SSLContext | None]:
    """A GET of ``url`` with credentials (``--user``, or ``$HIVE_REST_TOKEN``), and the TLS
    context to open it with (None: urllib's default)."""
    request = urllib.request.Request(url)
    if user is not None:
        password = os.environ.get(PASSWORD_VARIABLE)
        if password is None:
            password = getpass.getpass(f"REST API password of {user}: ")
        basic = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        request.add_header("Authorization", f"Basic {basic}")
    elif os.environ.get(TOKEN_VARIABLE):
        request.add_header("Authorization", f"Bearer {os.environ[TOKEN_VARIABLE]}")
    context = ssl.create_default_context(cafile=str(cacert)) if cacert is not None else None
    return request, context
