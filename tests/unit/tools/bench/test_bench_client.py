"""servekit bench's HTTP client: the response parser on any split of the stream, and keep-alive connections."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable

import pytest

from servekit.tools.bench.client import (
    Connection,
    ConnectionClosed,
    ProtocolError,
    Response,
    ResponseParser,
    build_request,
    fetch,
)
from servekit.tools.bench.spec import Target

R1 = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 13\r\nX-Servekit-Total-Ms: 1.5\r\n\r\n"
R1 += b'{"outputs":1}'
R2 = b'HTTP/1.1 404 Not Found\r\ncontent-length: 21\r\n\r\n{"error":"not found"}'
R3 = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nx-a: b\r\n\r\n"
R3 += b"5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nTrailer: x\r\n\r\n"
R4 = b"HTTP/1.1 204 No Content\r\nServer: t\r\n\r\n"
R5 = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
STREAM = R1 + R2 + R3 + R4 + R5 + R1
EXPECTED = [
    (200, b'{"outputs":1}'),
    (404, b'{"error":"not found"}'),
    (200, b"hello, world"),
    (204, b""),
    (200, b"ok"),
    (200, b'{"outputs":1}'),
]


def _parse(chunks: list[bytes]) -> list[Response]:
    parser = ResponseParser()
    out: list[Response] = []
    for chunk in chunks:
        parser.feed(chunk)
        while (r := parser.pop()) is not None:
            out.append(r)
    assert parser.idle
    return out


def _split(data: bytes, rng: random.Random) -> list[bytes]:
    cuts = sorted(rng.sample(range(1, len(data)), rng.randint(1, 12)))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


def test_keep_alive_stream_in_one_read() -> None:
    got = _parse([STREAM])
    assert [(r.status, r.body) for r in got] == EXPECTED
    first = got[0]
    assert first.header("x-servekit-total-ms") == "1.5"
    assert first.headers[b"content-type"] == b"application/json"  # names lower-cased, values as sent
    assert all(r.keep_alive for r in got)


def test_byte_by_byte() -> None:
    got = _parse([bytes([b]) for b in STREAM])
    assert [(r.status, r.body) for r in got] == EXPECTED


@pytest.mark.parametrize("seed", range(25))
def test_random_splits(seed: int) -> None:
    got = _parse(_split(STREAM, random.Random(seed)))
    assert [(r.status, r.body) for r in got] == EXPECTED


def test_partial_response_waits_for_more() -> None:
    parser = ResponseParser()
    parser.feed(R1[:-3])
    assert parser.pop() is None and not parser.idle
    parser.feed(R1[-3:])
    r = parser.pop()
    assert r is not None and r.body == b'{"outputs":1}'


def test_connection_close_and_http10() -> None:
    closing = _parse([b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx"])[0]
    assert not closing.keep_alive
    old = _parse([b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx"])[0]
    assert not old.keep_alive
    old_kept = _parse([b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nx"])[0]
    assert old_kept.keep_alive


def test_body_until_close() -> None:
    parser = ResponseParser()
    parser.feed(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nsome ")
    parser.feed(b"text")
    assert parser.pop() is None
    parser.feed_eof()
    r = parser.pop()
    assert r is not None and r.body == b"some text" and not r.keep_alive


def test_eof_in_the_middle_fails() -> None:
    parser = ResponseParser()
    parser.feed(R1[:40])
    with pytest.raises(ConnectionClosed):
        parser.feed_eof()
    ResponseParser().feed_eof()  # nothing started: a clean close


@pytest.mark.parametrize(
    "data",
    [b"SSH-2.0-OpenSSH\r\n\r\n", b"HTTP/1.1 abc OK\r\n\r\n", b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n"],
)
def test_garbage_is_a_protocol_error(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        ResponseParser().feed(data)


def test_bad_content_length_and_chunk_size() -> None:
    with pytest.raises(ProtocolError):
        ResponseParser().feed(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n")
    with pytest.raises(ProtocolError):
        ResponseParser().feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")


def test_build_request() -> None:
    req = build_request("POST", "/v1/models/m:predict", "h:1", {"Content-Type": "application/json"}, b'{"a":1}')
    assert req == (
        b"POST /v1/models/m:predict HTTP/1.1\r\nHost: h:1\r\nContent-Type: application/json\r\n"
        b'Content-Length: 7\r\n\r\n{"a":1}'
    )
    assert build_request("GET", "/ping", "h") == b"GET /ping HTTP/1.1\r\nHost: h\r\n\r\n"


# ---- against a local server ------------------------------------------------------------------------------------

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _serve(handler: Handler) -> tuple[asyncio.Server, Target, list[int]]:
    """A server running ``handler`` per connection; the list counts connections accepted."""
    accepted: list[int] = []

    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        try:
            await handler(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, Target("127.0.0.1", port, False), accepted


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return await reader.readexactly(length)


def _ok(body: bytes, close: bool = False) -> bytes:
    extra = b"Connection: close\r\n" if close else b""
    return b"HTTP/1.1 200 OK\r\n" + extra + b"Content-Length: %d\r\n\r\n" % len(body) + body


def test_keep_alive_reuses_one_connection() -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                body = await _read_request(reader)
            except asyncio.IncompleteReadError:
                return
            writer.write(_ok(body))

    async def main() -> None:
        server, target, accepted = await _serve(echo)
        async with server:
            conn = Connection(target)
            for i in range(5):
                r = await conn.request(build_request("POST", "/", target.authority, body=b"x" * i))
                assert r.status == 200 and r.body == b"x" * i
            await conn.wait_closed()
        assert len(accepted) == 1

    asyncio.run(main())


def test_connection_close_then_reconnect_and_stale_idle_retry() -> None:
    dropped = asyncio.Event()  # the server has closed the connection that answered b"a"

    async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = await _read_request(reader)
        if body == b"close":
            writer.write(_ok(b"bye", close=True))
        else:  # answer, then drop the idle keep-alive connection without a word
            writer.write(_ok(body))
        await writer.drain()
        writer.close()
        await writer.wait_closed()
        if body == b"a":
            dropped.set()

    async def main() -> None:
        server, target, accepted = await _serve(once)
        async with server:
            conn = Connection(target)
            r = await conn.request(build_request("POST", "/", target.authority, body=b"close"))
            assert r.body == b"bye" and not conn.is_open
            r = await conn.request(build_request("POST", "/", target.authority, body=b"a"))
            assert r.body == b"a"
            await dropped.wait()
            r = await conn.request(build_request("POST", "/", target.authority, body=b"b"))
            assert r.body == b"b"  # retried once on a fresh connection
            await conn.wait_closed()
        assert len(accepted) == 3

    asyncio.run(main())


def test_closed_mid_response_is_an_error_not_a_retry() -> None:
    async def half(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
        await writer.drain()

    async def main() -> None:
        server, target, accepted = await _serve(half)
        async with server:
            conn = Connection(target)
            with pytest.raises(ConnectionClosed):
                await conn.request(build_request("POST", "/", target.authority, body=b"x"))
            assert not conn.is_open
        assert len(accepted) == 1

    asyncio.run(main())


def test_abort_marks_timed_out() -> None:
    heard = asyncio.Event()  # the server has read the request it will never answer

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        heard.set()
        with contextlib.suppress(ConnectionError):
            await reader.read()  # until the client gives up

    async def main() -> None:
        server, target, _ = await _serve(silent)
        async with server:
            conn = Connection(target)
            pending = asyncio.ensure_future(conn.request(build_request("POST", "/", target.authority, body=b"x")))
            await heard.wait()
            conn.abort()  # what the run's watchdog does once the request's deadline has passed
            with pytest.raises(ConnectionError):
                await pending
            assert conn.timed_out
            server.close()

    asyncio.run(main())


def test_fetch_and_refused_port() -> None:
    async def main() -> None:
        server, target, _ = await _serve(lambda r, w: _answer_get(r, w))
        async with server:
            r = await fetch(target, "GET", "/v2/models/m")
            assert r.status == 200 and r.body == b'{"inputs":[]}'
        with pytest.raises(OSError):
            await fetch(target, "GET", "/", timeout=5)  # the server is gone: refused

    asyncio.run(main())


async def _answer_get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"GET /v2/models/m HTTP/1.1\r\n")
    writer.write(_ok(b'{"inputs":[]}'))
    await writer.drain()
