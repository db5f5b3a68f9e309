"""Fixtures: one real S3 API server (moto) for the session, emptied before each test; AWS
settings of the machine kept out of the tests."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from hive_ext_api.testing import extension_fixtures, service_fixtures

from s3_server import S3Server


@pytest.fixture(autouse=True)
def no_machine_aws_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The SDK's chain must find only what a test gives it (and never ask a metadata service)."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_DEFAULT_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                 "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "HIVE_S3_DISCOVERY_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))


only_this_extension, anyio_backend = extension_fixtures("s3-discovery")


# the server, running and empty, for each test (moto's buckets are the process's: reset)
s3_session, s3 = service_fixtures("s3", lambda folder: S3Server(), S3Server.reset)


@pytest.fixture
def bucket(s3: S3Server) -> str:
    """A fresh bucket on the server."""
    name = f"hive-{uuid.uuid4().hex[:12]}"
    client: Any = s3.client()
    client.create_bucket(Bucket=name, CreateBucketConfiguration={
        "LocationConstraint": "eu-central-1"})
    return name
