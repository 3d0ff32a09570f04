"""Read timeouts and the connection cap, in uvicorn run in process with each HTTP implementation and event loop
servekit may run on (h11 in the plain install, httptools and uvloop with ``[fast]``), over raw sockets.

Every wait here is bounded: a socket read with a deadline, or polling a condition with one.
"""

from __future__ import annotations

import asyncio
import http.client
import importlib.util
import logging
import select
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import pytest
import uvicorn

from servekit.config.models import ConnectionLimits
from servekit.launch.connections import HOLD_S, GuardStats, default_max_connections, guarded_protocol, resolve
from servekit.launch.serve import bind
from servekit.serving.protocols.http import RETRY_AFTER_SECONDS, Backlog

IMPLS = [
    pytest.param("h11", "asyncio", id="h11-asyncio"),
    pytest.param("httptools", "asyncio", id="httptools-asyncio"),
    pytest.param("h11", "uvloop", id="h11-uvloop"),
    pytest.param("httptools", "uvloop", id="httptools-uvloop"),
]
HEAD = b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n"


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Echoes the body's length; ``/late`` waits before it reads the body, as a busy handler would."""
    if scope["type"] != "http":
        return
    if scope["path"] == "/late":
        await asyncio.sleep(1.0)
    size, more = 0, True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        size += len(message.get("body", b""))
        more = message.get("more_body", False)
    body = b"%d" % size
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(body))]})
    await send({"type": "http.response.body", "body": body})


@dataclass
class Running:
    port: int
    stats: GuardStats
    server: uvicorn.Server

    def open_connections(self) -> int:
        return len(self.server.server_state.connections)


def _skip_unless_installed(http: str, loop: str) -> None:
    for module in {"h11": "h11", "httptools": "httptools"}[http], loop:
        if module != "asyncio" and importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed")


@contextmanager
def serving(limits: ConnectionLimits, http: str, loop: str, application: Any = app) -> Iterator[Running]:
    _skip_unless_installed(http, loop)
    limits = resolve(limits)
    stats = GuardStats(limits, backlog=getattr(application, "backlog", None))
    config = uvicorn.Config(
        application,
        http=guarded_protocol(limits, http, stats),  # type: ignore[arg-type]
        loop=loop,
        lifespan="off",
        log_level="warning",
        access_log=False,
    )
    server = uvicorn.Server(config)
    sock = bind("127.0.0.1", 0)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, "the server to start", alive=thread)
        yield Running(sock.getsockname()[1], stats, server)
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def wait_for(condition: Any, what: str, timeout: float = 5.0, alive: threading.Thread | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        assert alive is None or alive.is_alive(), f"thread died waiting for {what}"
        time.sleep(0.01)


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def read_until_closed(sock: socket.socket, timeout: float = 5.0) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and how long that took."""
    started = time.monotonic()
    deadline = started + timeout
    data = b""
    while True:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"connection still open after {timeout}s (got {data!r})"
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        except TimeoutError:
            raise AssertionError(f"connection still open after {timeout}s (got {data!r})") from None
        if not chunk:
            return data, time.monotonic() - started
        data += chunk


def read_response(sock: socket.socket) -> tuple[int, bytes]:
    """One response with a Content-Length from a kept-alive connection: its status and body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed mid-response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        body += sock.recv(65536)
    return int(head.split(b" ")[1]), body


@dataclass
class NormalClient:
    """Sends small requests on fresh connections until stopped; every one must succeed promptly."""

    port: int
    stop: threading.Event = field(default_factory=threading.Event)
    served: int = 0
    failures: list[str] = field(default_factory=list)

    def run(self) -> None:
        while not self.stop.is_set():
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            try:
                conn.request("POST", "/echo", body=b"hello")
                resp = conn.getresponse()
                if resp.status != 200 or resp.read() != b"5":
                    self.failures.append(f"status {resp.status}")
                else:
                    self.served += 1
            except OSError as exc:
                self.failures.append(repr(exc))
            finally:
                conn.close()
            self.stop.wait(0.02)  # pacing, not synchronisation

    @contextmanager
    def running(self) -> Iterator[NormalClient]:
        thread = threading.Thread(target=self.run, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.stop.set()
            thread.join(5)


def dribble_until_answered(sock: socket.socket, data: bytes, every: float = 0.05, timeout: float = 5.0) -> int:
    """Sends ``data`` a byte at a time, ``every`` seconds apart, until the server answers or closes; returns how
    many bytes went out."""
    deadline = time.monotonic() + timeout
    sent = 0
    while time.monotonic() < deadline:
        readable, _, _ = select.select([sock], [], [], every)
        if readable:
            return sent
        try:
            sock.send(data[sent % len(data) : sent % len(data) + 1])
        except OSError:  # closed under us
            return sent
        sent += 1
    raise AssertionError(f"server still reading a dribbled head after {timeout}s")


LIMITS = ConnectionLimits(idle_timeout_seconds=0.5, header_timeout_seconds=0.5, body_timeout_seconds=0.5)


@pytest.mark.parametrize(("http", "loop"), IMPLS)
def test_idle_slowloris_and_stalled_bodies_are_closed_while_others_are_served(http: str, loop: str) -> None:
    with serving(LIMITS, http, loop) as srv, NormalClient(srv.port).running() as normal:
        # Nothing sent: closed silently after the idle timeout.
        with connect(srv.port) as idle:
            data, took = read_until_closed(idle)
        assert data == b""
        assert 0.4 <= took < 3.0

        # A head dribbled a byte at a time, after a first request on the same kept-alive connection: the head
        # must be complete 0.5 s after its first byte, however steadily the bytes come.
        with connect(srv.port) as slow:
            slow.sendall(HEAD % 2 + b"hi")
            assert read_response(slow) == (200, b"2")
            slow.sendall(b"GET / HTTP/1.1\r\n")
            started = time.monotonic()
            sent = dribble_until_answered(slow, b"X-Slow: 1\r\n")
            answer, _ = read_until_closed(slow)
            took = time.monotonic() - started
        assert answer.startswith(b"HTTP/1.1 408 "), answer
        assert sent >= 5  # it kept sending up to the end
        assert 0.4 <= took < 3.0

        # A body stalled below its Content-Length: 408 once the body timeout has passed since the head.
        with connect(srv.port) as stalled:
            stalled.sendall(HEAD % 100 + b"x" * 10)
            answer, took = read_until_closed(stalled)
        assert answer.startswith(b"HTTP/1.1 408 "), answer
        assert 0.4 <= took < 3.0

        assert normal.served > 0
    assert normal.failures == []
    assert (srv.stats.totals["idle"], srv.stats.totals["head"], srv.stats.totals["body"]) == (1, 1, 1)


@pytest.mark.parametrize(("http", "loop"), IMPLS)
def test_slow_but_steady_clients_and_a_late_reader_are_not_cut_off(http: str, loop: str) -> None:
    limits = ConnectionLimits(idle_timeout_seconds=0.3, header_timeout_seconds=0.3, body_timeout_seconds=0.3)
    with serving(limits, http, loop) as srv:
        # The application reads a 1 MiB body only after 1 s, so the server stops reading (flow control) for
        # longer than the body timeout: that wait is the server's, not the client's, and the request succeeds.
        with connect(srv.port) as late:
            late.sendall(b"POST /late HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % 2**20)
            late.sendall(b"x" * 2**20)
            assert read_response(late) == (200, b"%d" % 2**20)
            # Kept alive: a second request on it is served (the head timer starts again at its first byte).
            late.sendall(HEAD % 3 + b"abc")
            assert read_response(late) == (200, b"3")
    assert sum(srv.stats.totals.values()) == 0


class Counting:
    """Records the server's backlog (requests received whole, not answered) as each request reaches it; ``/hold``
    then waits for its client to go away without answering."""

    def __init__(self) -> None:
        self.backlog = Backlog()
        self.seen: list[tuple[str, int]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        message = await receive()  # the whole (small) body
        self.seen.append((scope["path"], self.backlog.pending))
        if scope["path"] == "/hold":
            while message["type"] != "http.disconnect":
                message = await receive()
            return
        body = b"%d" % len(message.get("body", b""))
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": body.rjust(2)})


@pytest.mark.parametrize(("http", "loop"), IMPLS)
def test_the_backlog_counts_requests_received_and_not_yet_answered(http: str, loop: str) -> None:
    counting = Counting()
    with serving(ConnectionLimits(idle_timeout_seconds=30), http, loop, counting) as srv:
        held = connect(srv.port)
        held.sendall(b"POST /hold HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi")
        wait_for(lambda: counting.seen == [("/hold", 1)], "the held request to arrive alone")
        with connect(srv.port) as other:
            other.sendall(HEAD % 3 + b"abc")
            assert read_response(other) == (200, b" 3")
            assert counting.seen[1] == ("/echo", 2)  # the held one is still pending
            wait_for(lambda: counting.backlog.pending == 1, "the answered request to leave the backlog")
            other.sendall(HEAD % 1 + b"a")  # the same kept-alive connection, again
            assert read_response(other) == (200, b" 1")
        held.close()  # never answered: its connection's end takes it out of the backlog
        wait_for(lambda: counting.backlog.pending == 0, "the closed connection's request to leave the backlog")
    assert counting.seen == [("/hold", 1), ("/echo", 2), ("/echo", 2)]


@pytest.mark.parametrize(("http", "loop"), IMPLS[:2])
def test_connections_over_the_cap_are_refused_at_once_with_503_and_a_log_line(
    http: str, loop: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="servekit.connections")
    limits = ConnectionLimits(idle_timeout_seconds=30, max_connections=3)
    with serving(limits, http, loop) as srv:
        held = [connect(srv.port) for _ in range(3)]
        try:
            wait_for(lambda: srv.open_connections() == 3, "3 open connections")
            with connect(srv.port) as extra:
                answer, took = read_until_closed(extra)
            assert answer.startswith(b"HTTP/1.1 503 "), answer
            assert b"\r\nretry-after: 1\r\n" in answer.lower()
            assert took < 1.0
            assert "connection cap reached: refused 1 new connection(s)" in caplog.text
            assert "--max_connections 3" in caplog.text
            # Room again once one closes.
            held.pop().close()
            wait_for(lambda: srv.open_connections() == 2, "the closed connection to be gone")
            conn = http_client(srv.port)
            conn.request("POST", "/echo", body=b"ok")
            assert conn.getresponse().read() == b"2"
            conn.close()
        finally:
            for sock in held:
                sock.close()
    assert srv.stats.totals["refused"] == 1


def http_client(port: int) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", port, timeout=5)


def test_accepted_connections_get_tcp_nodelay_on_the_plain_asyncio_loop() -> None:
    """asyncio sets TCP_NODELAY on an accepted socket only when its proto is IPPROTO_TCP (inherited from the
    listening socket); without it small responses wait on Nagle's algorithm."""

    async def accepted_nodelay() -> int:
        sock = bind("127.0.0.1", 0)
        loop = asyncio.get_running_loop()
        got: asyncio.Future[int] = loop.create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                raw = transport.get_extra_info("socket")
                got.set_result(raw.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        server = await loop.create_server(Probe, sock=sock)
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
            value = await asyncio.wait_for(got, 5)
            writer.close()
            with suppress(ConnectionError):
                await writer.wait_closed()
            return value
        finally:
            server.close()
            await server.wait_closed()

    assert asyncio.run(accepted_nodelay()) != 0
    with bind("127.0.0.1", 0) as listener:
        assert listener.proto == socket.IPPROTO_TCP


def test_default_connection_cap_leaves_room_below_the_file_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    import resource

    monkeypatch.setattr(resource, "getrlimit", lambda _: (512, 4096))
    assert default_max_connections() == 384
    monkeypatch.setattr(resource, "getrlimit", lambda _: (20000, 20000))
    assert default_max_connections() == 15000
    assert resolve(ConnectionLimits(max_connections=7)).max_connections == 7


def test_overload_holds_are_spread_over_the_last_quarter_of_retry_after() -> None:
    """Equal holds would bring a burst of refused clients back in one instant; spread, never past Retry-After."""
    holds = [GuardStats(ConnectionLimits(max_connections=8), hold_s=None).hold_s() for _ in range(200)]
    assert all(0.75 * HOLD_S <= h <= HOLD_S for h in holds), (min(holds), max(holds))
    assert max(holds) - min(holds) > 0.15 * HOLD_S  # spread, not one value
    assert HOLD_S == float(RETRY_AFTER_SECONDS)
