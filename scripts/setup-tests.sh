#!/usr/bin/env bash
# Sets up a fresh machine for Hive's tests: the Debian packages and servers they use for real
# (mosquitto, HAProxy, Chromium, Consul, dockerd, dnsmasq, iproute2, iptables, Java for Spark),
# then .venv (scripts/setup.sh) with the test tools and Spark.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v mosquitto_pub >/dev/null 2>&1 || need_apt+=(mosquitto-clients)
command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || need_apt+=(mosquitto)
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || need_apt+=(haproxy)
# Headless Chromium and its WebDriver for the control center's browser tests.
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
[ -x /usr/bin/chromedriver ] || need_apt+=(chromium-driver)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
  else
    echo "setup: please install: ${need_apt[*]} (sudo apt-get install ${need_apt[*]})" >&2
  fi
fi
# The Debian packages start a system mosquitto on 1883 (Hive's default port) and a system
# haproxy; tests start their own on free ports.
if command -v systemctl >/dev/null 2>&1; then
  for unit in mosquitto haproxy; do
    if systemctl is-active --quiet "$unit" 2>/dev/null; then systemctl stop "$unit" || true; fi
  done
fi
bash scripts/testbed/consul.sh  # Consul 1.8.7 in .tools/bin, for hive-ext-consul's tests
bash scripts/testbed/netns.sh   # iproute2 for the network namespace tests
bash scripts/testbed/docker.sh  # dockerd and dnsmasq for hive-ext-docker's tests
bash scripts/testbed/iptables.sh  # iptables and setpriv for the chaos test's partitions
bash scripts/setup.sh
bash scripts/testbed/container.sh  # (after setup.sh: it uses .venv) docker-compose and offline wheels for tests/container
bash scripts/testbed/spark.sh   # Java if missing; pyspark, pyarrow, boto3, moto in .venv
