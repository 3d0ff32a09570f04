"""The load generator's HTTP/1.1 client: keep-alive connections on ``asyncio.open_connection``.

Requests are pre-built bytes (``build_request``), written in one call; responses are read with one
``read()`` per response in the common case and cut by an incremental parser that understands just what a
model server sends: the status line, headers, and a ``Content-Length``, chunked or read-until-close body.
A response with ``Connection: close`` (or an HTTP/1.0 one without keep-alive) closes the connection and
the next request opens a fresh one; a reused connection that the server closed while idle is retried once.

Measured capacity (the client must not be the bottleneck): **34,790 requests/s from one client process**
(104,384 responses in 3.0 s, p50 0.66 ms), closed loop over 32 keep-alive connections with uvloop, against a
trivial HTTP server in another process (``selftest.TrivialServer``: a fixed 211-byte 200 response carrying
servekit's timing headers; 156-byte requests), on a 2-core x86-64 VM with CPython 3.11.7 and uvloop 0.23,
at a moment the VM was otherwise idle. The client spent 25 us of CPU per request, so one core saturates
near 40,000 requests/s. While other jobs competed for the two cores, 5 s runs of the same command gave
10,000-25,000 requests/s at 25-37 us of client CPU per request. For scale, ``servekit serve`` answered
2,000-4,000 requests/s for the iris ONNX model on that VM, so the client has 5-10x headroom there.
Measured with::

    python -m servekit.tools.bench.selftest --concurrency 32 --duration 3s

which starts the trivial server in a subprocess, runs the closed loop against it, and prints requests/s and
the client's CPU time per request (the figure that holds up when the machine is busy).
"""

from __future__ import annotations

import asyncio
import math
import ssl
from collections import deque

from servekit.tools.bench.spec import Target

MAX_HEAD = 64 * 1024  # a status line and headers larger than this are not a server we understand
READ_SIZE = 256 * 1024


class ProtocolError(Exception):
    """The server sent something that is not an HTTP/1.x response."""


class ConnectionClosed(ConnectionError):
    """The server closed the connection before the response was complete."""


class Response:
    """One parsed response. Header names are lower-case bytes; values are bytes as sent."""

    __slots__ = ("body", "headers", "keep_alive", "status")

    def __init__(self, status: int, headers: dict[bytes, bytes], body: bytes, keep_alive: bool) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.keep_alive = keep_alive

    def header(self, name: str) -> str | None:
        value = self.headers.get(name.lower().encode("latin-1"))
        return None if value is None else value.decode("latin-1")

    def __repr__(self) -> str:
        return f"Response({self.status}, {len(self.body)} bytes, keep_alive={self.keep_alive})"


def build_request(
    method: str, path: str, authority: str, headers: dict[str, str] | None = None, body: bytes = b""
) -> bytes:
    """The complete request as bytes, built once and written as-is for every send."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {authority}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    if body or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


# Body framing of the response being parsed.
_LENGTH, _CHUNKED, _UNTIL_CLOSE = 0, 1, 2


class ResponseParser:
    """Incremental HTTP/1.1 response parser: ``feed`` bytes as they arrive, ``pop`` complete responses.

    Any split of the byte stream gives the same responses, and one feed may complete several
    (keep-alive). A body with neither length nor chunking ends at ``feed_eof``.
    """

    __slots__ = (
        "_body",
        "_buf",
        "_chunk_left",
        "_framing",
        "_headers",
        "_keep_alive",
        "_length",
        "_status",
        "_trailers",
        "responses",
    )

    def __init__(self) -> None:
        self._buf = bytearray()
        self._status = 0  # 0: waiting for a status line and headers
        self._headers: dict[bytes, bytes] = {}
        self._framing = _LENGTH
        self._length = 0
        self._keep_alive = True
        self._body = bytearray()
        self._chunk_left = -1  # chunked: -1 = expecting a size line
        self._trailers = False
        self.responses: deque[Response] = deque()

    @property
    def idle(self) -> bool:
        """Nothing of a response received yet (safe to resend the request elsewhere)."""
        return self._status == 0 and not self._buf

    def pop(self) -> Response | None:
        return self.responses.popleft() if self.responses else None

    def feed(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        while buf:
            if self._status == 0:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(buf) > MAX_HEAD:
                        raise ProtocolError(f"response head larger than {MAX_HEAD} bytes")
                    return
                head = bytes(buf[:end])
                del buf[: end + 4]
                self._head(head)
                continue
            if self._framing == _LENGTH:
                if len(buf) < self._length:
                    return
                body = bytes(buf[: self._length])
                del buf[: self._length]
                self._emit(body)
            elif self._framing == _CHUNKED:
                if not self._chunks():
                    return
            else:
                self._body += buf
                del buf[:]

    def feed_eof(self) -> None:
        """The server closed the connection: completes a read-until-close body, else fails a partial one."""
        if self._status and self._framing == _UNTIL_CLOSE:
            self._emit(bytes(self._body))
        elif not self.idle:
            raise ConnectionClosed("the server closed the connection in the middle of a response")

    def _head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        status_line = lines[0]
        if not status_line.startswith(b"HTTP/1.") or len(status_line) < 12 or not status_line[9:12].isdigit():
            raise ProtocolError(f"not an HTTP/1.x status line: {status_line[:80]!r}")
        status = int(status_line[9:12])
        headers: dict[bytes, bytes] = {}
        for line in lines[1:]:
            colon = line.find(b":")
            if colon <= 0:
                raise ProtocolError(f"malformed header line: {line[:80]!r}")
            headers[line[:colon].lower()] = line[colon + 1 :].strip()  # no space before ':' (RFC 9112)
        conn = headers.get(b"connection", b"").lower()
        self._keep_alive = b"close" not in conn if status_line[7:8] == b"1" else b"keep-alive" in conn
        self._headers = headers
        if 100 <= status < 200:  # interim (100 Continue): no body, and the real response follows
            return
        self._status = status
        if status in (204, 304):
            self._framing, self._length = _LENGTH, 0
        elif b"chunked" in headers.get(b"transfer-encoding", b"").lower():
            self._framing, self._chunk_left, self._trailers = _CHUNKED, -1, False
            self._body = bytearray()
        elif b"content-length" in headers:
            raw = headers[b"content-length"]
            if not raw.isdigit():
                raise ProtocolError(f"Content-Length {raw[:40]!r} is not a number")
            self._framing, self._length = _LENGTH, int(raw)
        else:
            self._framing, self._keep_alive = _UNTIL_CLOSE, False
            self._body = bytearray()
        if self._framing == _LENGTH and self._length == 0:
            self._emit(b"")

    def _chunks(self) -> bool:
        """Consume chunked body data; True once the response is complete."""
        buf = self._buf
        while True:
            if self._trailers:  # after the last chunk: trailer lines up to an empty line
                end = buf.find(b"\r\n")
                if end < 0:
                    return False
                del buf[: end + 2]
                if end == 0:
                    self._emit(bytes(self._body))
                    return True
                continue
            if self._chunk_left < 0:
                end = buf.find(b"\r\n")
                if end < 0:
                    if len(buf) > MAX_HEAD:
                        raise ProtocolError("chunk size line too long")
                    return False
                size = buf[:end].split(b";", 1)[0].strip()
                try:
                    self._chunk_left = int(size, 16)
                except ValueError:
                    raise ProtocolError(f"bad chunk size {bytes(size[:40])!r}") from None
                del buf[: end + 2]
                if self._chunk_left == 0:
                    self._trailers = True
                continue
            if len(buf) < self._chunk_left + 2:
                return False
            self._body += buf[: self._chunk_left]
            del buf[: self._chunk_left + 2]
            self._chunk_left = -1

    def _emit(self, body: bytes) -> None:
        self.responses.append(Response(self._status, self._headers, body, self._keep_alive))
        self._status = 0
        self._headers = {}
        self._framing = _LENGTH
        self._body = bytearray()


class Connection:
    """One keep-alive connection, opened lazily; one request in flight at a time (no pipelining).

    ``deadline`` is for a watchdog that serves every connection of a run (one timer instead of one per
    request): the driver sets it before a request, and the watchdog calls ``abort`` once it has passed.
    """

    __slots__ = ("_parser", "_reader", "_reused", "_writer", "connect_timeout", "deadline", "target", "timed_out")

    def __init__(self, target: Target, connect_timeout: float = 10.0) -> None:
        self.target = target
        self.connect_timeout = connect_timeout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._parser = ResponseParser()
        self._reused = False
        self.deadline = math.inf
        self.timed_out = False

    @property
    def is_open(self) -> bool:
        return self._writer is not None

    async def open(self) -> None:
        tls = ssl.create_default_context() if self.target.tls else None
        async with asyncio.timeout(self.connect_timeout):  # rare (keep-alive), so a timer of its own is cheap
            self._reader, self._writer = await asyncio.open_connection(
                self.target.host, self.target.port, ssl=tls, limit=READ_SIZE
            )
        self._parser = ResponseParser()
        self._reused = False

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    def abort(self) -> None:
        """Give up on the request in flight: its ``request`` call raises ConnectionClosed, ``timed_out`` set."""
        self.timed_out = True
        if self._writer is not None:
            self._writer.transport.abort()

    async def wait_closed(self) -> None:
        writer = self._writer
        self.close()
        if writer is not None:
            try:
                await writer.wait_closed()
            except OSError:
                pass

    async def request(self, data: bytes) -> Response:
        """Send ``data`` (a whole request) and read its response. Raises OSError or ProtocolError."""
        self.timed_out = False
        if self._writer is None:
            await self.open()
        try:
            try:
                return await self._exchange(data)
            except ConnectionError:
                # The server may close an idle keep-alive connection just as we reuse it: nothing of a
                # response arrived, so sending again on a fresh connection is what any HTTP client does.
                if self.timed_out or not (self._reused and self._parser.idle):
                    raise
                self.close()
                await self.open()
                return await self._exchange(data)
        except BaseException:
            self.close()
            raise

    async def _exchange(self, data: bytes) -> Response:
        reader, writer, parser = self._reader, self._writer, self._parser
        assert reader is not None and writer is not None
        writer.write(data)
        if len(data) > 65536:  # small writes go straight to the socket; only big bodies need flow control
            await writer.drain()
        while not parser.responses:
            chunk = await reader.read(READ_SIZE)
            if not chunk:
                parser.feed_eof()
                if not parser.responses:
                    raise ConnectionClosed("the server closed the connection before responding")
                break
            parser.feed(chunk)
        response = parser.responses.popleft()
        if response.keep_alive and not parser.responses:
            self._reused = True
        else:
            self.close()
        return response


async def fetch(target: Target, method: str, path: str, timeout: float = 10.0, body: bytes = b"") -> Response:
    """One request on a fresh connection (metadata look-ups before the load starts)."""
    conn = Connection(target, timeout)
    headers = {"Accept": "application/json", "Connection": "close"}
    async with asyncio.timeout(timeout):
        try:
            return await conn.request(build_request(method, path, target.authority, headers, body))
        finally:
            await conn.wait_closed()
