"""The gateway's client to its instances: HTTP/1.1 POSTs over pooled keep-alive connections, nothing more.

A general client (aiohttp) spends more of the gateway's CPU per forwarded request than everything else it does
together — request and response objects, header multidicts, a stream reader, tracing hooks. The instances are
servekit processes on loopback that answer with Content-Length (or chunked) bodies, so the gateway writes the
request head and body in one write and parses the answer straight from the bytes the event loop hands over:
one :class:`asyncio.Protocol` per connection, no reader task, no copies beyond the one body slice. Streaming
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

_MAX_HEAD = 64 * 1024  # a response head larger than this is not an instance's
_CRLF2 = b"\r\n\r\n"


class UpstreamGone(ConnectionError):
    """The instance refused the connection or closed it before its answer was complete."""


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: dict[str, str]  # names lower-cased, one value each (the last)
    body: bytes


class _Conn(asyncio.Protocol):
    """One keep-alive connection: parses the answer to the request in flight as its bytes arrive."""

    __slots__ = (
        "buf",
        "chunked",
        "chunks",
        "closed",
        "counted",
        "got_bytes",
        "headers",
        "need",
        "reusable",
        "status",
        "transport",
        "until_close",
        "waiter",
    )

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.waiter: asyncio.Future[Answer] | None = None
        self.buf = b""
        self.status = 0
        self.headers: dict[str, str] = {}
        self.need = -1  # body bytes still expected; -1: reading the head
        self.chunked = False
        self.chunks: list[bytes] = []
        self.until_close = False
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
        if self.until_close and self.need == -2:  # no length: the body ended with the connection
            self._finish(b"".join(self.chunks))
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
        buf = self.buf + data if self.buf else data
        self.buf = b""
        try:
            self._parse(buf)
        except (ValueError, IndexError) as exc:
            self.reusable = False
            if not self.waiter.done():
                self.waiter.set_exception(UpstreamGone(f"the instance's answer is not HTTP/1.1: {exc}"))
            self.close()

    # -- parsing
    def _parse(self, buf: bytes) -> None:
        while True:
            if self.need == -1:
                end = buf.find(_CRLF2)
                if end < 0:
                    if len(buf) > _MAX_HEAD:
                        raise ValueError("head too large")
                    self.buf = buf
                    return
                self._head(buf[:end])
                buf = buf[end + 4 :]
                if self.need == -1:  # 1xx: its head is skipped, the answer follows
                    continue
            if self.need == -2:  # no length: everything until the connection closes
                if buf:
                    self.chunks.append(buf)
                return
            if self.chunked:
                buf = self._chunks(buf)
                if self.chunked:
                    self.buf = buf
                    return
                self._finish(b"".join(self.chunks))
            elif len(buf) >= self.need:
                body = buf[: self.need] if len(buf) > self.need else buf
                rest = len(buf) - self.need
                self._finish(body)
                if rest:  # more than the answer: out of step
                    self.reusable = False
                    self.close()
            else:
                self.buf = buf
                return
            return

    def _head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        status_line = lines[0]
        if not status_line.startswith(b"HTTP/1."):
            raise ValueError(f"status line {status_line[:40]!r}")
        status = int(status_line[9:12])
        if 100 <= status < 200:
            return
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                raise ValueError(f"header line {line[:40]!r}")
            headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
        self.status = status
        self.headers = headers
        if headers.get("connection", "").lower() == "close" or status_line.startswith(b"HTTP/1.0"):
            self.reusable = False
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self.chunked, self.need, self.chunks = True, 0, []
        elif "content-length" in headers:
            self.need = int(headers["content-length"])
            if self.need < 0:
                raise ValueError("negative Content-Length")
        elif status in (204, 304):
            self.need = 0
        else:
            self.need, self.until_close, self.reusable, self.chunks = -2, True, False, []

    def _chunks(self, buf: bytes) -> bytes:
        """Consume whole chunks from ``buf``; returns what is left (``chunked`` turns False at the last chunk)."""
        while True:
            if self.need > 0:  # inside a chunk's data (plus its CRLF)
                if len(buf) < self.need + 2:
                    return buf
                self.chunks.append(buf[: self.need])
                buf = buf[self.need + 2 :]
                self.need = 0
            line_end = buf.find(b"\r\n")
            if line_end < 0:
                return buf
            size = int(buf[:line_end].split(b";", 1)[0], 16)
            if size == 0:
                trailer = buf.find(b"\r\n", line_end + 2)
                if trailer < 0:
                    return buf
                if trailer != line_end + 2:  # trailers: up to the empty line
                    trailer = buf.find(_CRLF2, line_end)
                    if trailer < 0:
                        return buf
                    trailer += 2
                self.chunked = False
                return buf[trailer + 2 :]
            buf = buf[line_end + 2 :]
            self.need = size

    def _finish(self, body: bytes) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(Answer(self.status, self.headers, body))

    # -- use
    def send(self, data: bytes, body: bytes, waiter: asyncio.Future[Answer]) -> None:
        self.waiter = waiter
        self.need, self.chunked, self.until_close, self.got_bytes = -1, False, False, False
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
