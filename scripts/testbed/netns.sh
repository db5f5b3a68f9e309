#!/usr/bin/env bash
# The network namespace test bed (tests/netns.py): iproute2's `ip` with netns and bridge support.
# Namespaces and bridges are made by the tests themselves, as root; nothing runs in between.
set -euo pipefail
. "$(dirname "$0")/_apt.sh"
if ! command -v ip >/dev/null 2>&1 || ! ip -j link show >/dev/null 2>&1; then
  apt_install testbed/netns.sh iproute2 || true
fi
if [ "$(id -u)" != 0 ]; then
  echo "setup: the network namespace tests (tests/cluster/test_lan_namespaces.py) need root" >&2
fi
