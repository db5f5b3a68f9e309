#!/usr/bin/env bash
# The Docker discovery tests' servers: Debian's docker.io (dockerd, containerd, runc and the
# matching client; the tests start their own daemon) and dnsmasq's binary (dnsmasq-base: no
# system service on port 53). Idempotent: installs only what is missing.
set -euo pipefail

need=()
[ -x /usr/sbin/dockerd ] || need+=(docker.io)
[ -x /usr/sbin/dnsmasq ] || need+=(dnsmasq-base)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "testbed/docker.sh: please install: ${need[*]} (sudo apt-get install ${need[*]})" >&2
    exit 0
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
# Where systemd runs, the package starts a system daemon: its docker0 and iptables rules (FORWARD
# DROP) would get in the way of other tests' bridges and namespaces.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet docker 2>/dev/null; then
  systemctl stop docker.socket docker || true
fi
