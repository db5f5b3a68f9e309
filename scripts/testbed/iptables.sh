#!/usr/bin/env bash
# The chaos test's partitions (tests/chaos): iptables on loopback, with the owner, conntrack,
# connmark, multiport and comment matches, and setpriv (util-linux) to start each node under a
# group id of its own. The test adds its rules itself, as root, and deletes them afterwards.
# Idempotent: installs only what is missing.
set -euo pipefail
. "$(dirname "$0")/_apt.sh"

need=()
command -v iptables >/dev/null 2>&1 || need+=(iptables)
command -v setpriv >/dev/null 2>&1 || need+=(util-linux)
apt_install testbed/iptables.sh "${need[@]}" || exit 0
if [ "$(id -u)" != 0 ]; then
  echo "testbed/iptables.sh: the chaos test's partitions (tests/chaos) need root" >&2
  exit 0
fi
# The matches the test uses, tried once on a chain of our own (kernel modules may be missing).
chain="HIVECHAOSCHECK$$"
iptables -w 5 -N "$chain"
trap 'iptables -w 5 -F "$chain"; iptables -w 5 -X "$chain"' EXIT
iptables -w 5 -A "$chain" -m connmark --mark 1 -p tcp -m multiport --ports 1,2 \
  -m comment --comment hive-chaos-check -j DROP
iptables -w 5 -A "$chain" -m conntrack --ctstate NEW -m owner --gid-owner 1 -j RETURN
