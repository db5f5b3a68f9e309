"""A port forwarder standing in for NAT: connections to (public host, port) reach (private, port).

    with PortForward(("127.0.0.11", 0), ("127.0.0.1", 7800)) as nat:
        nat.public   # ("127.0.0.11", 41234): the address other nodes are told to dial

Only what is forwarded is reachable on the public address, as behind a real NAT. Threads copy
the bytes both ways; ``close()`` ends every connection and the listener.
"""

from __future__ import annotations

import contextlib
import socket
import threading

__all__ = ["PortForward"]


class PortForward:
    def __init__(self, public: tuple[str, int], private: tuple[str, int]) -> None:
        self.private = private
        self._listener = socket.create_server(public)
        self.public: tuple[str, int] = self._listener.getsockname()[:2]
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        self.accepted = 0  # connections forwarded so far
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                inbound, _ = self._listener.accept()
            except OSError:
                return
            try:
                outbound = socket.create_connection(self.private, timeout=5)
            except OSError:
                inbound.close()
                continue
            outbound.settimeout(None)
            with self._lock:
                if self._closed:
                    inbound.close()
                    outbound.close()
                    return
                self._sockets += [inbound, outbound]
                self.accepted += 1
            for source, sink in ((inbound, outbound), (outbound, inbound)):
                threading.Thread(target=self._copy, args=(source, sink), daemon=True).start()

    @staticmethod
    def _copy(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sockets, self._sockets = self._sockets, []
        with contextlib.suppress(OSError):  # wakes the thread blocked in accept()
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self._thread.join(5)

    def __enter__(self) -> PortForward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
