"""Endpoints that are not the service an extension expects, for testing how it copes.

A discovery extension must survive its service answering garbage or never answering at all
(logged, counted, retried; the node runs on). These stand in for a misconfigured endpoint (a web
server answering everything with a page) and for a hung one (a port whose connections are
accepted by the kernel and never answered).
"""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["IMPOSTOR_PAGE", "impostor_http_server", "silent_port"]

IMPOSTOR_PAGE = b"<html><body>It works!</body></html>"


class _Page(http.server.BaseHTTPRequestHandler):
    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)  # a PUT's body, read so the client sees the answer
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(IMPOSTOR_PAGE)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(IMPOSTOR_PAGE)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def impostor_http_server() -> Iterator[str]:
    """An HTTP server on 127.0.0.1 answering every request 200 with an HTML page; its URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True, name="impostor-http")
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@contextmanager
def silent_port() -> Iterator[int]:
    """A TCP port on 127.0.0.1 that accepts connections (the kernel does) and never answers."""
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield int(sock.getsockname()[1])
    finally:
        sock.close()
