#!/usr/bin/env bash
# Sets up what running a node needs: a virtualenv (.venv) with Hive installed in it.
# The tests need more (real servers, Spark): scripts/setup-tests.sh installs those and calls this.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[dev]"
sha256sum pyproject.toml > .venv/.hive-setup-stamp  # run.sh sets up again only when it changes
