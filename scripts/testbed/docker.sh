#!/usr/bin/env bash
# The Docker discovery tests' servers: Debian's docker.io (dockerd, containerd, runc and the
# matching client; the tests start their own daemon) and dnsmasq's binary (dnsmasq-base: no
# system service on port 53). Idempotent: installs only what is missing.
set -euo pipefail
. "$(dirname "$0")/_apt.sh"

need=()
[ -x /usr/sbin/dockerd ] || need+=(docker.io)
[ -x /usr/sbin/dnsmasq ] || need+=(dnsmasq-base)
apt_install testbed/docker.sh "${need[@]}" || exit 0
# Where systemd runs, the package starts a system daemon: its docker0 and iptables rules (FORWARD
# DROP) would get in the way of other tests' bridges and namespaces.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet docker 2>/dev/null; then
  systemctl stop docker.socket docker || true
fi
