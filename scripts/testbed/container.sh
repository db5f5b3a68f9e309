#!/usr/bin/env bash
# tests/container: Debian's docker-compose (the engine and dnsmasq come from docker.sh), and the
# wheels the image's build stage installs from, since the tests' build has no package index:
# hive-broker's dependencies and its build backend, for each Python the tests may run on, in
# .cache/container-wheels/py3NN. Idempotent: pip keeps what it downloaded in its cache.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/testbed/_apt.sh

bash scripts/testbed/docker.sh
[ -x /usr/bin/docker-compose ] || apt_install testbed/container.sh docker-compose || true

requirements=.cache/container-wheels/requirements.txt
mkdir -p .cache/container-wheels
.venv/bin/python - "$requirements" <<'PY'
import sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))
wanted = [*project["build-system"]["requires"], *project["project"]["dependencies"]]
open(sys.argv[1], "w").write("\n".join(wanted) + "\n")
PY
for version in 3.11 3.12 3.13; do
  .venv/bin/python -m pip download -q --disable-pip-version-check --only-binary :all: \
    --python-version "$version" --dest ".cache/container-wheels/py${version/./}" -r "$requirements"
done
