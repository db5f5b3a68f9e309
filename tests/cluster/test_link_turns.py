"""A link far behind its peer does not read megabytes in one turn of the event loop.

uvloop (libuv) reads a socket with data waiting up to 32 times in a row before it runs timers
or serves other sockets; a node that fell behind a fast peer decoded and routed several MiB of
frames per turn, and its heartbeats and clients waited a second and more (the bench's
``cluster`` scenario: loop lag of 225 ms on the subscribers' node). A real TCP link on uvloop,
fed 8 MiB at once by a blocking socket in a thread: no turn of the loop handles much more than
``READ_TURN`` bytes of frames, and every frame arrives."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading

import pytest
import uvloop

from hive_core.cluster._link import READ_TURN, PeerLink
from hive_core.cluster._wire import FrameKind, encode_frame

pytestmark = pytest.mark.timeout(30)

FRAME = encode_frame(FrameKind.HEARTBEAT, [1, 2, 3, 4, b"x" * 200])
COUNT = 8 * 1024 * 1024 // len(FRAME)


def test_a_link_reads_at_most_about_read_turn_bytes_per_turn_of_the_loop() -> None:
    per_turn: list[int] = [0]

    async def main() -> None:
        done = asyncio.get_running_loop().create_future()
        handled = 0

        def on_frame(_link: PeerLink, kind: FrameKind, _body: object) -> None:
            nonlocal handled
            assert kind is FrameKind.HEARTBEAT
            handled += 1
            per_turn[-1] += 1
            if handled == COUNT and not done.done():
                done.set_result(None)

        async def turns() -> None:  # one step per turn of the loop
            while True:
                per_turn.append(0)
                await asyncio.sleep(0)

        links: list[PeerLink] = []

        def link() -> PeerLink:
            links.append(PeerLink(on_frame, lambda _: None, outbound=False))
            return links[-1]

        server = await asyncio.get_running_loop().create_server(link, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        sender = socket.create_connection(("127.0.0.1", port))
        sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * 1024 * 1024)
        counter = asyncio.create_task(turns())
        thread = threading.Thread(target=sender.sendall, args=(FRAME * COUNT,))
        thread.start()
        try:
            await asyncio.wait_for(done, 15)
        finally:
            counter.cancel()
            with contextlib.suppress(OSError):  # a sendall still blocked (a failure) ends
                sender.shutdown(socket.SHUT_RDWR)
            thread.join(5)
            sender.close()
            for peer_link in links:
                peer_link.close()
            server.close()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())
    most = max(per_turn)
    assert sum(per_turn) == COUNT
    # One turn may end with part of a read past READ_TURN: two reads' worth at most.
    assert most * len(FRAME) <= 2 * READ_TURN, (most, len(FRAME))
