"""What S3's failures say in the log: in S3's terms, naming the bucket."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError
from botocore.parsers import ResponseParserError

from hive_ext_s3._bucket import describe


def client_error(code: str, message: str = "") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, "PutObject")


@pytest.mark.parametrize(("error", "said"), [
    (client_error("NoSuchBucket"), "bucket 'b' does not exist"),
    (client_error("404"), "bucket 'b' does not exist"),
    (client_error("AccessDenied", "Access Denied"),
     "access to bucket 'b' denied (AccessDenied): check the credentials and the bucket's policy"),
    (client_error("InvalidAccessKeyId"), "access to bucket 'b' denied (InvalidAccessKeyId)"),
    (client_error("SlowDown", "Please reduce your request rate."),
     "S3 answered SlowDown: Please reduce your request rate."),
    (NoCredentialsError(), "no AWS credentials"),
    (EndpointConnectionError(endpoint_url="http://127.0.0.1:9"),
     'cannot reach S3: Could not connect to the endpoint URL: "http://127.0.0.1:9"'),
    (ResponseParserError("Unable to parse response"),
     "the endpoint's answer is not S3's: Unable to parse response"),
    (ValueError("odd"), "ValueError: odd"),
])
def test_failures_are_described_in_s3s_terms(error: Exception, said: str) -> None:
    assert describe(error, "b").startswith(said)
