#!/usr/bin/env bash
# Spark for hive-ext-spark's tests: a Java runtime (when `java` is missing) and, in .venv, the
# Python side of Spark (pyspark, pyarrow), boto3 and moto's S3 server. The package itself is not
# installed in .venv (its entry point would load into every core test's node): tox's spark-py3*
# envs install it from its wheel.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/testbed/_apt.sh

command -v java >/dev/null 2>&1 || apt_install testbed/spark.sh openjdk-17-jre-headless || true
.venv/bin/python -m pip install -q "pyspark>=4.0,<5" "pyarrow>=15" "boto3>=1.34" "moto[server]>=5"
