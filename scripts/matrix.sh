#!/usr/bin/env bash
# Runs tox (the compatibility matrix) with pyenv's Pythons on PATH; arguments go to tox.
# Without arguments: the whole matrix (core and examples on 3.11, 3.12, 3.13, and lint).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/tox ] || bash scripts/setup.sh
if command -v pyenv >/dev/null 2>&1; then
  root=$(pyenv root)
  for minor in 3.11 3.12 3.13; do
    found=$(ls -d "$root"/versions/"$minor".* 2>/dev/null | sort -V | tail -n 1 || true)
    [ -n "$found" ] && PATH="$found/bin:$PATH"
  done
  export PATH
fi
exec .venv/bin/tox "$@"
