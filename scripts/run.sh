#!/usr/bin/env bash
# Starts one Hive node on the embedded default (TCP 1883, ./data); arguments go to `hive run`.
# Sets up first (scripts/setup.sh) only when .venv lacks Hive or pyproject.toml changed since the
# last setup; that output is shown only when the setup fails.
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=.venv/.hive-setup-stamp  # written by scripts/setup.sh: the pyproject.toml it installed
if [ ! -x .venv/bin/hive ] || ! sha256sum --status -c "$stamp" 2>/dev/null; then
  echo "run.sh: setting Hive up in .venv (scripts/setup.sh) ..." >&2
  log=$(mktemp)
  if ! bash scripts/setup.sh >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    echo "run.sh: scripts/setup.sh failed (its output is above)" >&2
    exit 1
  fi
  rm -f "$log"
fi
exec .venv/bin/hive run "$@"
