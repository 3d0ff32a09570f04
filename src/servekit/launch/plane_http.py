"""``servekit up``'s HTTP/1.1 protocol: uvicorn's httptools protocol, with InvokeEndpoint answered without ASGI.

Every InvokeEndpoint pays the plane's HTTP server before the gateway forwards it, and under uvicorn the largest
share of the plane's CPU per request was the ASGI glue, not servekit's work (benchmarks/GATEWAY_RESULTS.md:
81 µs of ~180-280 µs a request went to uvicorn's protocol and the ASGI cycle: the scope dict, the cycle object
and its event, the receive and send messages and their checks). A request the plane says it takes
(:meth:`~servekit.edge.plane.ControlPlane.takes_invocation`: ``POST /endpoints/{name}/invocations``, kept alive,
no query, no ``Expect``, none in flight before it on the connection) is collected here and handed to the plane's
:meth:`~servekit.edge.plane.ControlPlane.invoke` as path, headers and body; its answer is written to the
transport as one buffer. The plane does the same work as for any API call (SigV4, validation, routing, metrics,
capture, shadows), so nothing a client sees changes; everything else (other APIs, streaming, S3, the console,
pipelined requests, ``Expect: 100-continue``) takes uvicorn's path as before.

The request's cycle here is an :class:`_Invocation`, which has the attributes uvicorn's protocol reads of a cycle
(``response_complete``, ``disconnected``, ``keep_alive``, ``message_event``), so its connection-lost, shutdown and
pipelining logic work unchanged: a request that arrives behind it on the same connection is queued by uvicorn
and started when this one's answer is written.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from servekit.edge.plane import MAX_BODY, TOO_LARGE

log = logging.getLogger(__name__)

_FAILED = b'{"message": "internal error"}'


class FastInvoke(Protocol):
    """What the plane offers this protocol (servekit.edge.plane.ControlPlane)."""

    def takes_invocation(self, raw_path: bytes, headers: Sequence[tuple[bytes, bytes]]) -> bool: ...

    def invoke(
        self, raw_path: str, raw_headers: Sequence[tuple[bytes, bytes]], body: bytes
    ) -> Awaitable[tuple[int, list[tuple[bytes, bytes]], bytes]]: ...


class _NoEvent:
    """uvicorn sets its cycle's event when body or a disconnect arrives; nobody waits on this cycle's."""

    __slots__ = ()

    def set(self) -> None:
        return None


_NO_EVENT = _NoEvent()


class _Invocation:
    """One InvokeEndpoint answered here: its request and what uvicorn's protocol reads of a cycle."""

    __slots__ = ("body", "disconnected", "headers", "keep_alive", "raw_path", "response_complete", "size")
    message_event = _NO_EVENT

    def __init__(self, raw_path: str, headers: list[tuple[bytes, bytes]]) -> None:
        self.raw_path = raw_path
        self.headers = headers
        self.body: list[bytes] = []
        self.size = 0
        self.response_complete = False
        self.disconnected = False
        self.keep_alive = True  # uvicorn's shutdown() clears it: the connection closes after the answer


def _json(status: int, body: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    return status, [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))], body


def plane_protocol(app: FastInvoke, max_body: int = MAX_BODY) -> type[asyncio.Protocol]:
    """The protocol class to give uvicorn (``Config(http=...)``) for the plane ``app``; request bodies over
    ``max_body`` bytes are answered 413, as the ASGI path does."""

    class PlaneProtocol(HttpToolsProtocol):
        def on_headers_complete(self) -> None:
            parser = self.parser
            cycle = self.cycle
            if (
                parser.get_method() == b"POST"
                and not self.expect_100_continue
                and (cycle is None or cycle.response_complete)
                and not self.pipeline
                and parser.should_keep_alive()
                and not parser.should_upgrade()
            ):
                url = httptools.parse_url(self.url)
                if not url.query and app.takes_invocation(url.path, self.headers):
                    self.cycle = _Invocation(url.path.decode("latin-1"), self.headers)  # type: ignore[assignment]
                    return
            super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            invocation = self.cycle
            if not isinstance(invocation, _Invocation):
                super().on_body(body)
                return
            invocation.size += len(body)
            if invocation.size <= max_body:  # past it the rest is read and dropped, then answered 413
                invocation.body.append(body)

        def on_message_complete(self) -> None:
            invocation = self.cycle
            if not isinstance(invocation, _Invocation):
                super().on_message_complete()
                return
            task = self.loop.create_task(self._answer(invocation))
            task.add_done_callback(self.tasks.discard)
            self.tasks.add(task)  # uvicorn's graceful shutdown waits for it

        async def _answer(self, invocation: _Invocation) -> None:
            if invocation.size > max_body:
                status, headers, body = _json(413, TOO_LARGE)
            else:
                try:
                    status, headers, body = await app.invoke(
                        invocation.raw_path, invocation.headers, b"".join(invocation.body)
                    )
                except Exception:
                    log.exception("InvokeEndpoint failed in the plane")
                    status, headers, body = _json(500, _FAILED)
            invocation.response_complete = True
            transport = self.transport
            if invocation.disconnected or transport.is_closing():
                return
            out = [STATUS_LINE[status]]  # uvicorn's status lines (100-599: what an HTTP status can be)
            for name, value in (*self.server_state.default_headers, *headers):
                out += (name, b": ", value, b"\r\n")
            if not invocation.keep_alive:
                out.append(b"connection: close\r\n")
            out += (b"\r\n", body)
            transport.write(b"".join(out))
            if not invocation.keep_alive:
                transport.close()
                return
            self.on_response_complete()

    return PlaneProtocol


def is_plane(app: Any) -> bool:
    """Whether ``app`` offers the InvokeEndpoint fast path (a plane does; a test's bare ASGI app does not)."""
    return callable(getattr(app, "takes_invocation", None)) and callable(getattr(app, "invoke", None))
