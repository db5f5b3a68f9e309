#!/usr/bin/env bash
# Sets up a fresh machine for Hive: system packages the tests use, and a virtualenv with Hive in it.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v mosquitto_pub >/dev/null 2>&1 || need_apt+=(mosquitto-clients)
command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || need_apt+=(mosquitto)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
  else
    echo "setup: please install: ${need_apt[*]} (sudo apt-get install ${need_apt[*]})" >&2
  fi
fi
# The Debian package starts a system mosquitto on 1883; Hive's default port. Tests use free ports,
# but a developer running `hive run` expects 1883 to be free.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet mosquitto 2>/dev/null; then
  systemctl stop mosquitto || true
fi
bash scripts/testbed/consul.sh  # Consul 1.8.7 in .tools/bin, for hive-ext-consul's tests

bash scripts/testbed/netns.sh  # iproute2 for the network namespace tests

bash scripts/testbed/docker.sh  # dockerd and dnsmasq for hive-ext-docker's tests

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[dev]"
bash scripts/testbed/spark.sh  # Java if missing; pyspark, pyarrow, boto3, moto in .venv

sha256sum pyproject.toml > .venv/.hive-setup-stamp  # run.sh sets up again only when it changes
