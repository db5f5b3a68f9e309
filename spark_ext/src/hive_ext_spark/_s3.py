"""An S3 client from the extension's settings or the job's options (boto3, imported lazily)."""

from __future__ import annotations

from typing import Any

from hive_ext_spark._deps import require

# Bounded waits: a dead endpoint must not hold the shipper (or a Spark task) for minutes.
CLIENT_CONFIG = {"connect_timeout": 5, "read_timeout": 30,
                 "retries": {"max_attempts": 2, "mode": "standard"}}


def s3_client(*, region: str, endpoint_url: str | None, path_style: bool,
              access_key_id: str | None = None, secret_access_key: str | None = None,
              needed_for: str = "S3") -> Any:
    """A boto3 S3 client; without keys, boto3's default chain finds the credentials."""
    boto3 = require("boto3", needed_for)
    config_module = require("botocore.config", needed_for)
    config = config_module.Config(
        **CLIENT_CONFIG, s3={"addressing_style": "path" if path_style else "auto"})
    session = boto3.session.Session(aws_access_key_id=access_key_id,
                                    aws_secret_access_key=secret_access_key,
                                    region_name=region)
    return session.client("s3", endpoint_url=endpoint_url, config=config)


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` -> (``bucket``, ``some/prefix/``)."""
    rest = uri[len("s3://"):]
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ValueError(f"{uri!r} names no bucket (expected s3://BUCKET/PREFIX)")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return bucket, prefix
