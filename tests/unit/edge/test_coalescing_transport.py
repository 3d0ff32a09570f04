"""servekit up's transport wrapper: what uvicorn writes within one event-loop turn (a response's head, then its
body) leaves as one write at the end of the turn; a large body goes at once; close and write_eof flush first,
abort drops; a closing transport is not written to."""

from __future__ import annotations

import asyncio
from typing import Any

from servekit.launch.coalesce import CoalescingTransport, coalescing_protocol


class Recorder:
    """The transport underneath: records each write it is handed."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.eof = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def write_eof(self) -> None:
        self.eof = True

    def abort(self) -> None:
        self.closed = True

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 1)}.get(name, default)


def wrap() -> tuple[CoalescingTransport, Recorder]:
    inner = Recorder()
    return CoalescingTransport(inner, asyncio.get_running_loop()), inner  # type: ignore[arg-type]


def test_head_and_body_leave_in_one_write_at_the_end_of_the_turn() -> None:
    async def run() -> None:
        t, inner = wrap()
        t.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
        t.write(b"{}")
        assert inner.writes == [] and t.get_write_buffer_size() == 40
        await asyncio.sleep(0)  # one turn of the loop
        assert inner.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
        t.write(b"next")
        await asyncio.sleep(0)
        assert inner.writes[1:] == [b"next"]
        assert t.get_extra_info("peername") == ("127.0.0.1", 1)  # everything else is the real transport's

    asyncio.run(run())


def test_large_bodies_go_at_once_and_close_flushes() -> None:
    async def run() -> None:
        t, inner = wrap()
        t.write(b"head")
        t.write(b"x" * 70_000)
        assert inner.writes == [b"head" + b"x" * 70_000]  # past the threshold: flow control sees it now
        t.write(b"tail")
        t.close()
        assert inner.writes[-1] == b"tail" and inner.closed
        await asyncio.sleep(0)
        assert len(inner.writes) == 2  # nothing written twice, nothing after close

    asyncio.run(run())


def test_eof_flushes_abort_drops_and_a_closing_transport_is_left_alone() -> None:
    async def run() -> None:
        t, inner = wrap()
        t.write(b"a")
        t.write_eof()
        assert inner.writes == [b"a"] and inner.eof
        t.write(b"dropped")
        t.abort()
        await asyncio.sleep(0)
        assert inner.writes == [b"a"] and inner.closed
        t.write(b"late")
        await asyncio.sleep(0)
        assert inner.writes == [b"a"]

    asyncio.run(run())


def test_the_protocol_is_uvicorns() -> None:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    assert issubclass(coalescing_protocol(), HttpToolsProtocol)  # httptools is a default dependency


def test_a_complete_response_leaves_without_waiting_for_the_turn() -> None:
    import uvicorn
    from uvicorn.server import ServerState

    async def app(scope: Any, receive: Any, send: Any) -> None:  # never called: no request is parsed here
        raise AssertionError

    async def run() -> None:
        config = uvicorn.Config(app, http=coalescing_protocol(), log_level="warning")
        config.load()
        made: Any = config.http_protocol_class  # uvicorn's protocol class (typed as a bare asyncio.Protocol)
        protocol = made(config=config, server_state=ServerState(), app_state={})
        inner = Recorder()
        protocol.connection_made(inner)
        protocol.transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
        assert inner.writes == []
        protocol.on_response_complete()  # uvicorn calls it once the body's last byte is written
        assert inner.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"]
        protocol.connection_lost(None)

    asyncio.run(run())
