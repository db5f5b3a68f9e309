"""``hive-file-auth-hash``: print a users-file entry (Scrypt hash, fresh salt) for one user."""

from __future__ import annotations

import argparse
import getpass
import json
import sys

from hive_ext_file_auth._passwords import hash_password
from hive_ext_file_auth._permissions import is_valid_filter


def _toml_list(values: list[str]) -> str:
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"  # JSON strings are TOML strings


def entry(username: str, password: str, publish: list[str], subscribe: list[str]) -> str:
    """The TOML table for ``username``, ready to append to the users file."""
    salt, password_hash = hash_password(password.encode("utf-8"))
    return "\n".join([
        f"[users.{json.dumps(username)}]",
        f"salt = {json.dumps(salt)}",
        f"hash = {json.dumps(password_hash)}",
        f"publish = {_toml_list(publish)}",
        f"subscribe = {_toml_list(subscribe)}",
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="hive-file-auth-hash",
        description="Print a [users.<name>] entry for the hive-ext-file-auth users file.")
    parser.add_argument("username")
    parser.add_argument("--password-stdin", action="store_true",
                        help="read the password from the first line of standard input "
                             "(default: prompt twice)")
    parser.add_argument("--publish", action="append", default=[], metavar="FILTER",
                        help="a topic filter the user may publish to (repeat for more)")
    parser.add_argument("--subscribe", action="append", default=[], metavar="FILTER",
                        help="a topic filter the user may subscribe to (repeat for more)")
    args = parser.parse_args(argv)
    bad = [f for f in args.publish + args.subscribe if not is_valid_filter(f)]
    if bad:
        parser.error(f"not valid MQTT topic filters: {', '.join(bad)}")
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass("Password: ")
        if getpass.getpass("Again: ") != password:
            parser.error("the passwords differ")
    if not password:
        parser.error("the password is empty")
    sys.stdout.write(entry(args.username, password, args.publish, args.subscribe))
    return 0


if __name__ == "__main__":
    sys.exit(main())
