"""The gateway's raw keep-alive client against a loopback server that writes exactly the bytes each test needs:
Content-Length and chunked answers (whole or split across writes), reuse of one connection, the keep-alive race
(the server closed a kept connection: the request goes again on a fresh one), refusal, the timeout, the per-host
connection limit, and header bytes passed through as sent."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from servekit.gateway.upstream import Upstream, UpstreamGone

Reply = Callable[[bytes, asyncio.StreamWriter], Awaitable[bool]]  # request head -> keep the connection open?


class Server:
    """Reads one request at a time (head + Content-Length body) and lets ``reply`` answer it."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.connections = 0
        self.requests: list[tuple[bytes, bytes]] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                body = await reader.readexactly(length)
                self.requests.append((head, body))
                if not await self.reply(head, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


def answer(body: bytes, extra: bytes = b"") -> Reply:
    async def reply(head: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n" + extra)
        writer.write(b"content-length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()
        return True

    return reply


async def with_server(reply: Reply, test: Callable[[str, Server], Awaitable[None]]) -> Server:
    server = Server(reply)
    url = await server.start()
    try:
        await test(url, server)
    finally:
        await server.stop()
    return server


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_content_length_answers_reuse_one_connection(loop: str) -> None:
    async def test(url: str, server: Server) -> None:
        client = Upstream()
        for i in range(3):
            got = await client.post(url, "/invocations", {"Content-Type": "application/json"}, b"[%d]" % i)
            assert (got.status, got.body, got.headers["content-type"]) == (200, b"hello", "text/plain")
        await client.close()
        assert server.connections == 1
        head, body = server.requests[2]
        assert head.startswith(b"POST /invocations HTTP/1.1\r\n") and body == b"[2]"
        assert b"\r\nContent-Type: application/json\r\n" in head and b"\r\nContent-Length: 3\r\n" in head

    if loop == "uvloop":  # the event loop servekit up runs: its transports are not asyncio's classes
        uvloop = pytest.importorskip("uvloop")
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(with_server(answer(b"hello"), test))
    else:
        asyncio.run(with_server(answer(b"hello"), test))


def test_chunked_and_split_answers() -> None:
    async def reply(head: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nx-servekit-total-ms: 1.5\r\n\r\n")
        await writer.drain()
        for piece in (b"5\r\nhel", b"lo\r\n", b"6\r\n world\r\n0\r\n", b"\r\n"):
            writer.write(piece)
            await writer.drain()
        return True

    async def test(url: str, server: Server) -> None:
        client = Upstream()
        for _ in range(2):  # the second on the same connection: the first answer was consumed exactly
            got = await client.post(url, "/invocations", {}, b"x")
            assert (got.status, got.body, got.headers["x-servekit-total-ms"]) == (200, b"hello world", "1.5")
        await client.close()
        assert server.connections == 1

    asyncio.run(with_server(reply, test))


def test_an_interim_answer_is_skipped_and_a_body_without_length_ends_with_the_connection() -> None:
    async def reply(head: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil ")
        await writer.drain()
        writer.write(b"the end")
        await writer.drain()
        return False  # the close ends the body

    async def test(url: str, server: Server) -> None:
        client = Upstream()
        got = await client.post(url, "/invocations", {}, b"x")
        assert (got.status, got.body) == (200, b"until the end")
        await client.close()

    asyncio.run(with_server(reply, test))


def test_an_answer_that_is_not_http_is_the_instance_gone() -> None:
    async def reply(head: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"SMTP ready\r\n\r\n")
        await writer.drain()
        return True

    async def test(url: str, server: Server) -> None:
        with pytest.raises(UpstreamGone, match=r"not HTTP/1\.1"):
            await Upstream().post(url, "/invocations", {}, b"x")

    asyncio.run(with_server(reply, test))


def test_a_kept_connection_the_server_closed_is_replaced() -> None:
    async def reply(head: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 503 Busy\r\ncontent-length: 4\r\n\r\nbusy")
        await writer.drain()
        return False  # closes after each answer, as an instance's keep-alive timer does

    async def test(url: str, server: Server) -> None:
        client = Upstream()
        first = await client.post(url, "/invocations", {}, b"1")
        # the close has not necessarily reached the client: the pooled connection may still look open
        second = await client.post(url, "/invocations", {}, b"2")
        assert (first.status, second.status, second.body) == (503, 503, b"busy")
        await client.close()
        assert server.connections == 2 and [b for _, b in server.requests] == [b"1", b"2"]

    asyncio.run(with_server(reply, test))


def test_refused_and_timed_out() -> None:
    async def silent(head: bytes, writer: asyncio.StreamWriter) -> bool:
        await asyncio.Event().wait()  # never answers; the client's timeout ends it
        return False

    async def test(url: str, server: Server) -> None:
        client = Upstream(timeout_s=0.05)
        with pytest.raises(TimeoutError):
            await client.post(url, "/invocations", {}, b"x")
        await client.close()

    asyncio.run(with_server(silent, test))

    async def refused() -> None:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        with pytest.raises(UpstreamGone):
            await Upstream().post(f"http://127.0.0.1:{port}", "/invocations", {}, b"x")

    asyncio.run(refused())


def test_the_per_host_limit_queues_requests_on_one_connection() -> None:
    async def test(url: str, server: Server) -> None:
        client = Upstream(limit_per_host=1)
        got = await asyncio.gather(*(client.post(url, "/invocations", {}, b"%d" % i) for i in range(5)))
        assert [g.body for g in got] == [b"ok"] * 5
        await client.close()
        assert server.connections == 1 and len(server.requests) == 5

    asyncio.run(with_server(answer(b"ok"), test))


def test_headers_pass_through_byte_for_byte_and_line_breaks_are_refused() -> None:
    async def test(url: str, server: Server) -> None:
        client = Upstream()
        sent = "caf\xe9"  # the plane decodes header bytes as latin-1: they go out as the same byte
        await client.post(url, "/invocations", {"X-Amzn-SageMaker-Custom-Attributes": sent}, b"")
        assert b"\r\nX-Amzn-SageMaker-Custom-Attributes: caf\xe9\r\n" in server.requests[0][0]
        with pytest.raises(ValueError, match="line break"):
            await client.post(url, "/invocations", {"Accept": "a\r\nX-Evil: 1"}, b"")
        await client.close()

    asyncio.run(with_server(answer(b""), test))
