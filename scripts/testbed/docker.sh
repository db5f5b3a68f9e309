#!/usr/bin/env bash
# The Docker discovery tests' servers: Debian's docker.io (dockerd, containerd, runc and the
# matching client, which the tests start themselves) and dnsmasq's binary (dnsmasq-base: no system
# service on port 53). Idempotent: installs only what is missing.
set -euo pipefail

need=()
[ -x /usr/sbin/dockerd ] || [ -x /usr/bin/dockerd ] || need+=(docker.io)
[ -x /usr/sbin/dnsmasq ] || need+=(dnsmasq-base)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "testbed/docker.sh: please install: ${need[*]} (sudo apt-get install ${need[*]})" >&2
  exit 0
fi
apt-get update -qq
# Debian's docker.io would start a system daemon where systemd runs; the tests start their own.
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
