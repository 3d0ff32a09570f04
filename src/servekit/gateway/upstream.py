"""The gateway's client to its instances: HTTP/1.1 POSTs over pooled keep-alive connections, nothing more.

A general client (aiohttp) spends more of the gateway's CPU per forwarded request than everything else it does
together — request and response objects, header multidicts, a stream reader, tracing hooks. The instances are
servekit processes on loopback that answer with Content-Length (or chunked) bodies, so the gateway writes the
request head and body in one write and parses the answer straight from the bytes the event loop hands over:
one :class:`asyncio.Protocol` per connection feeding httptools' response parser, no reader task. Streaming
answers (InvokeEndpointWithResponseStream) and the multi-model load calls keep the general client.

A connection is reused last-in first-out (the warmest), dropped once idle longer than the instances keep it
(uvicorn closes after 5 s), and a request on a reused connection that the instance closed before answering a
byte (its keep-alive timer won the race) is sent again once on a fresh connection.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

import httptools


class UpstreamGone(ConnectionError):
    """The instance refused the connection or closed it before its answer was complete."""


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: dict[str, str]  # names lower-cased, one value each (the last)
    body: bytes


class _Conn(asyncio.Protocol):
    """One keep-alive connection: the answer to the request in flight is parsed by httptools (llhttp, the parser
    servekit's own server runs) as its bytes arrive."""

    __slots__ = (
        "closed",
        "counted",
        "got_bytes",
        "headed",
        "headers",
        "parser",
        "parts",
        "reusable",
        "transport",
        "waiter",
    )

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.waiter: asyncio.Future[Answer] | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.headers: dict[str, str] = {}
        self.parts: list[bytes] = []
        self.headed = False  # the answer's head is parsed
        self.reusable = True
        self.got_bytes = False
        self.counted = True  # counts against its host's connection limit until discarded

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio's subclasses

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        if self.headed and self.parser.get_status_code() >= 200 and not self.parser.should_keep_alive():
            self._answer()  # no length: the body ended with the connection (httptools has no end-of-input call)
            return
        waiter.set_exception(UpstreamGone(f"the instance closed the connection ({exc or 'EOF'})"))

    def eof_received(self) -> bool | None:
        return False  # close our side too

    def data_received(self, data: bytes) -> None:
        if self.waiter is None:  # bytes nobody asked for: the connection is out of step, never reuse it
            self.reusable = False
            self.close()
            return
        self.got_bytes = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.reusable = False
            if not self.waiter.done():
                self.waiter.set_exception(UpstreamGone(f"the instance's answer is not HTTP/1.1: {exc}"))
            self.close()

    # -- httptools' callbacks
    def on_message_begin(self) -> None:
        if self.waiter is None or self.waiter.done():  # more than the answer: out of step
            self.reusable = False
            self.close()
        self.headers = {}
        self.parts = []
        self.headed = False

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.headed = True

    def on_body(self, body: bytes) -> None:
        self.parts.append(body)

    def on_message_complete(self) -> None:
        status = self.parser.get_status_code()
        if status < 200:  # 1xx: its head is skipped, the answer follows
            return
        if not self.parser.should_keep_alive():
            self.reusable = False
        self._answer()

    def _answer(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            parts = self.parts
            body = parts[0] if len(parts) == 1 else b"".join(parts)
            waiter.set_result(Answer(self.parser.get_status_code(), self.headers, body))

    # -- use
    def send(self, data: bytes, body: bytes, waiter: asyncio.Future[Answer]) -> None:
        self.waiter = waiter
        self.got_bytes = self.headed = False  # nothing of this answer yet (the last one's head is not it)
        assert self.transport is not None
        if len(body) <= 65536:
            self.transport.write(data + body)
        else:  # a large body is not copied into one buffer with the head
            self.transport.writelines((data, body))

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class _Host:
    __slots__ = ("authority", "host", "idle", "open", "port", "waiters")

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.authority = f"{host}:{port}".encode("latin-1")
        self.idle: deque[tuple[_Conn, float]] = deque()
        self.open = 0
        self.waiters: deque[asyncio.Future[_Conn | None]] = deque()


class Upstream:
    """Pooled HTTP/1.1 POSTs to instances by base URL (``http://127.0.0.1:PORT``)."""

    def __init__(
        self,
        limit_per_host: int = 64,
        timeout_s: float = 60.0,
        idle_s: float = 4.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``idle_s``: an idle connection older than this is not reused (below the instances' keep-alive)."""
        self._limit = limit_per_host
        self._timeout = timeout_s
        self._idle_s = idle_s
        self._clock = clock
        self._hosts: dict[str, _Host] = {}
        self._closed = False

    def _host(self, url: str) -> _Host:
        host = self._hosts.get(url)
        if host is None:
            parts = urlsplit(url)
            if parts.scheme != "http" or parts.hostname is None:
                raise ValueError(f"the gateway forwards over plain HTTP only, not to {url!r}")
            host = self._hosts[url] = _Host(parts.hostname, parts.port or 80)
        return host

    async def post(self, url: str, path: str, headers: dict[str, str], body: bytes) -> Answer:
        """The instance's whole answer; raises :class:`UpstreamGone` (not reached, or closed before answering)
        and ``TimeoutError`` (no complete answer within the timeout)."""
        host = self._host(url)
        head = _head(path, host.authority, headers, len(body))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        fresh = False
        while True:
            conn, reused = await self._acquire(host, loop, fresh, deadline)
            waiter: asyncio.Future[Answer] = loop.create_future()
            timer = loop.call_at(deadline, _expire, conn, waiter)
            try:
                conn.send(head, body, waiter)
                answer = await waiter
            except UpstreamGone:
                self._discard(host, conn)
                if reused and not conn.got_bytes and not fresh:  # the keep-alive race: once more, on a new one
                    fresh = True
                    continue
                raise
            except BaseException:  # timed out or cancelled mid-request: the connection is out of step
                self._discard(host, conn)
                raise
            finally:
                timer.cancel()
                conn.waiter = None
            self._release(host, conn)
            return answer

    async def _acquire(
        self, host: _Host, loop: asyncio.AbstractEventLoop, fresh: bool, deadline: float
    ) -> tuple[_Conn, bool]:
        if self._closed:
            raise UpstreamGone("the gateway is closing")
        if not fresh:
            now = self._clock()
            while host.idle:
                conn, since = host.idle.pop()
                if not conn.closed and now - since < self._idle_s:
                    return conn, True
                self._discard(host, conn)
        while host.open >= self._limit:
            waiter: asyncio.Future[_Conn | None] = loop.create_future()
            host.waiters.append(waiter)
            try:
                async with asyncio.timeout_at(deadline):
                    handed = await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                    passed = waiter.result()  # handed over just as we gave up: pass it on
                    if passed is not None:
                        self._release(host, passed)
                    else:
                        self._wake(host)
                elif waiter in host.waiters:
                    host.waiters.remove(waiter)
                raise
            if handed is not None:
                return handed, True
        host.open += 1
        try:
            async with asyncio.timeout_at(deadline):
                _, conn = await loop.create_connection(_Conn, host.host, host.port)
        except OSError as exc:
            host.open -= 1
            self._wake(host)
            raise UpstreamGone(f"the instance could not be reached: {exc}") from None
        except BaseException:
            host.open -= 1
            self._wake(host)
            raise
        return conn, False

    def _release(self, host: _Host, conn: _Conn) -> None:
        if not conn.reusable or conn.closed or self._closed:
            self._discard(host, conn)
            return
        while host.waiters:
            waiter = host.waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return
        host.idle.append((conn, self._clock()))

    def _discard(self, host: _Host, conn: _Conn) -> None:
        conn.close()
        if conn.counted:
            conn.counted = False
            host.open -= 1
            self._wake(host)

    @staticmethod
    def _wake(host: _Host) -> None:
        """A connection slot came free: the first waiter opens a connection of its own."""
        while host.waiters:
            waiter = host.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def close(self) -> None:
        self._closed = True
        for host in self._hosts.values():
            while host.idle:
                conn, _ = host.idle.pop()
                self._discard(host, conn)
            while host.waiters:
                waiter = host.waiters.popleft()
                if not waiter.done():
                    waiter.set_exception(UpstreamGone("the gateway is closing"))
        await asyncio.sleep(0)  # let the transports close


def _expire(conn: _Conn, waiter: asyncio.Future[Answer]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())
    conn.reusable = False
    conn.close()


def _head(path: str, authority: bytes, headers: dict[str, str], length: int) -> bytes:
    parts = [b"POST ", path.encode("latin-1"), b" HTTP/1.1\r\nHost: ", authority]
    parts.append(b"\r\nContent-Length: %d\r\n" % length)
    for name, value in headers.items():
        if "\r" in value or "\n" in value:
            raise ValueError(f"header {name} has a line break")
        try:
            raw = value.encode("latin-1")  # byte for byte as the client sent it (the plane decodes latin-1)
        except UnicodeEncodeError:
            raw = value.encode("utf-8")
        parts += (name.encode("latin-1"), b": ", raw, b"\r\n")
    parts.append(b"\r\n")
    return b"".join(parts)
