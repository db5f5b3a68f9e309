#!/usr/bin/env bash
# Builds a wheel of every distribution in the repository into a wheelhouse (default
# dist/wheelhouse): every folder with a pyproject.toml, found by search (the root's hive-broker,
# extensions/*, examples/*, spark_ext/ and whatever comes next). None of them is on a public
# index, so this is where pip finds them:
#
#   bash scripts/wheelhouse.sh
#   pip install --find-links dist/wheelhouse hive-ext-s3
#
# (hive-broker comes from the wheelhouse, the other dependencies from the package index.)
# PYTHON names the interpreter whose pip builds the wheels (default .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-.venv/bin/python}
if [ ! -x "$PY" ] && ! command -v "$PY" >/dev/null 2>&1; then
  bash scripts/setup.sh >/dev/null
  PY=.venv/bin/python
fi
OUT=${1:-dist/wheelhouse}
mkdir -p "$OUT"

# Hidden folders (.venv, .tox, .git), build output and node_modules hold no project of ours.
mapfile -t projects < <(find . \( -name '.?*' -o -name build -o -name dist -o -name node_modules \) \
  -prune -o -name pyproject.toml -print | sed 's#/pyproject.toml$##' | sort)
if [ ${#projects[@]} -eq 0 ]; then
  echo "wheelhouse: no pyproject.toml found" >&2
  exit 1
fi

rm -f "$OUT"/*.whl
# setuptools packs whatever an earlier build left in <project>/build/lib into the wheel, modules
# deleted since included: every wheel is built from its sources alone.
for project in "${projects[@]}"; do rm -rf "$project/build"; done
"$PY" -m pip wheel --quiet --no-deps --wheel-dir "$OUT" "${projects[@]}"
echo "wheelhouse: ${#projects[@]} distributions in $OUT:"
ls -1 "$OUT"/*.whl | sed 's#.*/#  #'
