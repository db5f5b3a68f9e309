#!/usr/bin/env bash
# Sets up (scripts/setup-tests.sh) and runs every check CI runs: lint, types, the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-tests.sh
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
.venv/bin/ruff check hive_core hive_ext_api tests
.venv/bin/mypy
# Two workers: the tests start real broker processes on free ports, so they run side by side.
# Tests marked slow (the simulation's seed ranges) run in tox (README: Compatibility matrix).
.venv/bin/python -m pytest -q -n 2 -m "not slow" "$@"
