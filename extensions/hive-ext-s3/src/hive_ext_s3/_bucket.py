"""The bucket through boto3: credentials as boto3 users expect, and the node records' objects.

Every call is blocking (boto3 is); the extension runs them off the node's event loop. Failures
of S3 come out as :class:`BucketUnavailable` whose message says what went wrong in S3's terms
(the bucket is missing, access is denied, the endpoint does not answer), never as a traceback.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    ProfileNotFound,
)
from botocore.parsers import ResponseParserError

from hive_ext_s3._config import ConfigError, S3Settings

# Short timeouts and one retry: a reload must end well within the node's 5 s hook deadline.
CLIENT_CONFIG = {"connect_timeout": 1.5, "read_timeout": 2.0,
                 "retries": {"total_max_attempts": 2, "mode": "standard"}}

# What a broken or impostor endpoint makes boto3 raise, besides S3's own error answers.
_FAILURES = (ClientError, BotoCoreError, ResponseParserError)

_DENIED = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403",
           "ExpiredToken", "InvalidToken", "AllAccessDisabled"}
_MISSING_BUCKET = {"NoSuchBucket", "404"}


class BucketUnavailable(Exception):
    """The bucket could not be read or written; the message says why, in S3's terms."""


def _session(settings: S3Settings) -> Any:
    credentials = settings.credentials
    region = settings.signing_region
    kind = credentials.kind
    if kind in ("access_key", "temporary_session"):
        return boto3.Session(aws_access_key_id=credentials.access_key_id,
                             aws_secret_access_key=credentials.secret_access_key,
                             aws_session_token=credentials.session_token, region_name=region)
    if kind == "environment_variables":
        key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
        if not key or not secret:
            raise ConfigError(f"{settings.source}: credentials-type environment_variables needs "
                              "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment")
        return boto3.Session(aws_access_key_id=key, aws_secret_access_key=secret,
                             aws_session_token=os.environ.get("AWS_SESSION_TOKEN") or None,
                             region_name=region)
    if kind in ("user_credentials_file", "profile"):
        try:
            return boto3.Session(profile_name=credentials.profile_name or "default",
                                 region_name=region)
        except ProfileNotFound:
            where = os.environ.get("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials")
            raise ConfigError(
                f"{settings.source}: credentials-profile-name "
                f"{credentials.profile_name or 'default'!r} is not a profile in {where} "
                "(nor in the AWS config file)") from None
    return boto3.Session(region_name=region)  # default: the SDK's whole chain


def s3_client(settings: S3Settings) -> Any:
    """A boto3 S3 client as the settings say; :class:`ConfigError` when no credentials are found.

    With credentials-type default this asks the SDK's chain once: the environment, the shared
    credentials and config files, then the container and instance roles.
    """
    session = _session(settings)
    if session.get_credentials() is None:
        raise ConfigError(
            f"{settings.source}: credentials-type {settings.credentials.kind} found no AWS "
            "credentials (environment, shared credentials file, container or instance role); "
            "set credentials-type access_key with credentials-access-key-id and "
            "credentials-secret-access-key, or provide them to the SDK")
    addressing = {None: "auto", True: "path", False: "virtual"}[settings.path_style_access]
    config = Config(**CLIENT_CONFIG, s3={"addressing_style": addressing})
    return session.client("s3", endpoint_url=settings.endpoint_url,
                           region_name=settings.signing_region, config=config)


def describe(exc: Exception, bucket: str) -> str:
    """What went wrong, in S3's terms, for the log."""
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        if code in _MISSING_BUCKET:
            return f"bucket {bucket!r} does not exist"
        if code in _DENIED:
            return (f"access to bucket {bucket!r} denied ({code}): check the credentials and "
                    "the bucket's policy")
        return f"S3 answered {code or 'an error'}: {error.get('Message') or exc}"
    if isinstance(exc, NoCredentialsError):
        return "no AWS credentials"
    if isinstance(exc, EndpointConnectionError):
        return f"cannot reach S3: {exc}"
    if isinstance(exc, ResponseParserError):
        return f"the endpoint's answer is not S3's: {exc}"
    return f"{type(exc).__name__}: {exc}"


class NodeBucket:
    """The objects under ``prefix`` in ``bucket``: one per node, named by its node id."""

    def __init__(self, client: Any, bucket: str, prefix: str) -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix

    def key_of(self, node_id: str) -> str:
        return f"{self.prefix}{node_id}"

    def _call(self, operation: str, **kwargs: Any) -> Any:
        try:
            return getattr(self.client, operation)(Bucket=self.bucket, **kwargs)
        except _FAILURES as exc:
            raise BucketUnavailable(describe(exc, self.bucket)) from exc

    def put(self, node_id: str, body: bytes) -> None:
        self._call("put_object", Key=self.key_of(node_id), Body=body,
                   ContentType="application/json")

    def delete(self, key: str) -> None:
        self._call("delete_object", Key=key)

    def object_keys(self) -> Iterator[str]:
        """Every key under the prefix (all pages of the listing)."""
        token: str | None = None
        while True:
            extra = {"ContinuationToken": token} if token else {}
            page = self._call("list_objects_v2", Prefix=self.prefix, **extra)
            if page.get("Name") != self.bucket:  # a 200 with any XML (or none) parses as {}
                raise BucketUnavailable(f"the endpoint's answer to listing bucket "
                                        f"{self.bucket!r} is not S3's")
            for item in page.get("Contents", ()):
                yield str(item["Key"])
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return

    def read(self, key: str) -> bytes | None:
        """The object's bytes; None when it went away since the listing."""
        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=key)
            return bytes(answer["Body"].read())
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise BucketUnavailable(describe(exc, self.bucket)) from exc
        except _FAILURES as exc:
            raise BucketUnavailable(describe(exc, self.bucket)) from exc
