#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and starts one Hive node on the embedded default (TCP 1883, ./data).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/hive run "$@"
