#!/usr/bin/env bash
# Sets up (scripts/setup-tests.sh) and runs every check CI runs: lint, types, the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-tests.sh
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
.venv/bin/ruff check hive_core hive_ext_api tests
.venv/bin/mypy
# Three workers on two cores: the tests start real broker processes on free ports, so they run
# side by side, and they wait on them for a third of the time (two workers kept the cores 68 %
# busy; three take the suite from about 15 to 12 minutes). --durations: what to look at when CI
# nears its 30 minutes. Tests marked slow (the simulation's seed ranges) run in tox (README:
# Compatibility matrix).
.venv/bin/python -m pytest -q -n 3 -m "not slow" --durations=25 "$@"
