#!/usr/bin/env bash
# The network namespace test bed (tests/netns.py): iproute2's `ip` with netns and bridge support.
# Namespaces and bridges are made by the tests themselves, as root; nothing runs in between.
set -euo pipefail
if ! command -v ip >/dev/null 2>&1 || ! ip -j link show >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iproute2
  else
    echo "setup: the namespace tests need iproute2 (sudo apt-get install iproute2)" >&2
  fi
fi
if [ "$(id -u)" != 0 ]; then
  echo "setup: the network namespace tests (tests/cluster/test_lan_namespaces.py) need root" >&2
fi
