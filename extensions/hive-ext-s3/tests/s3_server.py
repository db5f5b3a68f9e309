"""A real S3 HTTP API on loopback: moto's server, which can go down and come back on its port.

moto keeps its buckets in the process, not in the server: stopping the server and starting it
again on the same port is an outage that loses nothing, as with a real S3.
"""

from __future__ import annotations

import json
import socket
import threading
import urllib.request
from typing import Any

import boto3
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import BaseWSGIServer, make_server

ACCESS_KEY = "hive-test-key"
SECRET_KEY = "hive-test-secret"
REGION = "eu-central-1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class S3Server:
    def __init__(self) -> None:
        self.port = 0
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def never_started(cls) -> S3Server:
        """A server that is down from the start: nothing listens on its (free) port."""
        server = cls()
        server.port = free_port()
        return server

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> S3Server:
        """Serve on ``self.port`` (a free one the first time)."""
        app = DomainDispatcherApplication(create_backend_app)
        self._server = make_server("127.0.0.1", self.port, app, threaded=True,
                                   request_handler=MotoRequestHandler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name=f"moto-s3-{self.port}")
        self._thread.start()
        return self

    def stop(self) -> None:
        """Down: the port refuses connections until :meth:`start`."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(10)

    def reset(self) -> None:
        """Forget every bucket (moto's reset API)."""
        request = urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST")
        with urllib.request.urlopen(request, timeout=10):
            pass

    def client(self) -> object:
        return boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION,
                            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)

    def keys(self, bucket: str, prefix: str) -> list[str]:
        """The keys of the objects under ``prefix`` in ``bucket``, as S3 lists them."""
        client: Any = self.client()
        return [item["Key"] for item in
                client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])]

    def records(self, bucket: str, prefix: str) -> dict[str, Any]:
        """The objects under ``prefix`` in ``bucket``, each read as JSON, by key."""
        client: Any = self.client()
        return {key: json.loads(client.get_object(Bucket=bucket, Key=key)["Body"].read())
                for key in self.keys(bucket, prefix)}

    def properties(self, bucket: str, **overrides: str | None) -> str:
        """An ``s3discovery.properties`` for this server (keys as in the file, ``_`` for ``-``;
        None leaves a key out)."""
        settings = {
            "credentials-type": "access_key",
            "credentials-access-key-id": ACCESS_KEY,
            "credentials-secret-access-key": SECRET_KEY,
            "s3-bucket-region": REGION,
            "s3-bucket-name": bucket,
            "s3-endpoint": self.endpoint,
            "s3-path-style-access": "true",
        }
        for key, value in overrides.items():
            settings[key.replace("_", "-")] = value  # type: ignore[assignment]
        return "".join(f"{key}:{value}\n" for key, value in settings.items() if value is not None)
