"""``servekit up``'s HTTP protocol: uvicorn's, with a response's head and body leaving in one write.

uvicorn writes an ASGI response's head when the app sends ``http.response.start`` and its body on
``http.response.body``: two writes, each a system call that pushes a TCP segment through loopback and wakes the
client. On the gateway's InvokeEndpoint path that second send is a measurable share of the plane's CPU (py-spy,
benchmarks/GATEWAY_RESULTS.md). Here the transport uvicorn writes to holds what is written within one turn of the
event loop and hands it on at the end of that turn (``call_soon``) as one write; anything past
``_FLUSH_AT`` bytes goes at once, so the real transport's flow control still sees large bodies as they are written.
Closing, ``write_eof`` and ``abort`` flush (or drop) what is held first, and a complete response is flushed at
once (the protocol's ``on_response_complete``) rather than at the end of the turn.
"""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any

_FLUSH_AT = 64 * 1024


class CoalescingTransport:
    """Wraps a transport: writes within one event-loop turn leave together; everything else is passed through."""

    __slots__ = ("_held", "_loop", "_scheduled", "_size", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []
        self._size = 0
        self._scheduled = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        self._held.append(bytes(data))
        self._size += len(data)
        if self._size >= _FLUSH_AT:
            self.flush()
        elif not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._flush_later)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def _flush_later(self) -> None:
        self._scheduled = False
        self.flush()

    def flush(self) -> None:
        held = self._held
        if not held:
            return
        self._held, self._size = [], 0
        if self._transport.is_closing():
            return
        self._transport.write(held[0] if len(held) == 1 else b"".join(held))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._held, self._size = [], 0
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return self._size + self._transport.get_write_buffer_size()

    def __getattr__(self, name: str) -> Any:  # reading side, extra info, flow-control limits: the real transport's
        return getattr(self._transport, name)


def coalescing_protocol() -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol where httptools is installed (h11's elsewhere), writing through a
    :class:`CoalescingTransport`."""
    base: Any
    if importlib.util.find_spec("httptools") is not None:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
    else:
        from uvicorn.protocols.http.h11_impl import H11Protocol as base

    class Coalescing(base):  # type: ignore[misc]
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(CoalescingTransport(transport, asyncio.get_running_loop()))  # type: ignore[arg-type]

        def on_response_complete(self) -> None:
            self.transport.flush()  # the response is whole: send it now, not at the end of the loop's turn
            super().on_response_complete()

    return Coalescing
