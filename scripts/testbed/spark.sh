#!/usr/bin/env bash
# Spark for hive-ext-spark's tests: a Java runtime (when `java` is missing) and, in .venv, the
# Python side of Spark (pyspark, pyarrow), boto3 and moto's S3 server. The package itself is not
# installed in .venv (its entry point would load into every core test's node): tox's spark-py3*
# envs install it from its wheel.
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v java >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      openjdk-17-jre-headless
  else
    echo "spark.sh: please install a Java runtime: sudo apt-get install openjdk-17-jre-headless" >&2
  fi
fi
.venv/bin/python -m pip install -q "pyspark>=4.0,<5" "pyarrow>=15" "boto3>=1.34" "moto[server]>=5"
