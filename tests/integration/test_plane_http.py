"""``servekit up``'s HTTP/1.1 protocol (launch/plane_http.py) in uvicorn, in process, over raw sockets: the
InvokeEndpoint fast path answers what the ASGI path answers, and everything else (other paths, pipelined requests,
``Expect: 100-continue``, oversized bodies, a failing handler) keeps HTTP's guarantees.

Every wait is bounded: a socket read with a deadline, or polling a condition with one.
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials

from servekit.aws import Credentials
from servekit.launch.plane_http import is_plane, plane_protocol
from servekit.launch.serve import bind
from servekit.launch.up import build

LOOPS = [pytest.param("asyncio", id="asyncio"), pytest.param("uvloop", id="uvloop")]
INVOKE = b"/endpoints/ep/invocations"
PER_REQUEST = {b"x-amzn-requestid", b"x-amz-request-id", b"x-amz-id-2", b"date", b"last-modified"}


class FakePlane:
    """An ASGI app with the plane's fast-path methods: records which path each request took."""

    def __init__(self, fail: bool = False) -> None:
        self.fast: list[tuple[str, bytes]] = []
        self.asgi: list[str] = []
        self.fail = fail
        self.release = threading.Event()
        self.release.set()

    def takes_invocation(self, raw_path: bytes, headers: Sequence[tuple[bytes, bytes]]) -> bool:
        return raw_path.endswith(b"/invocations")

    async def invoke(
        self, raw_path: str, raw_headers: Sequence[tuple[bytes, bytes]], body: bytes
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        self.fast.append((raw_path, body))
        while not self.release.is_set():  # a slow model: the answer waits (polled, bounded by the test's reads)
            await asyncio.sleep(0.005)
        if self.fail:
            raise RuntimeError("the gateway broke")
        out = b"fast:" + body
        return 200, [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(out))], out

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        self.asgi.append(scope["path"])
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        out = b"asgi:" + b"".join(chunks)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(out))]})
        await send({"type": "http.response.body", "body": out})


@contextmanager
def serving(app: Any, loop: str, fast: bool = True, max_body: int = 1 << 20) -> Iterator[int]:
    if loop == "uvloop" and importlib.util.find_spec("uvloop") is None:
        pytest.skip("uvloop is not installed")
    http: Any = plane_protocol(app, max_body) if fast else "httptools"
    config = uvicorn.Config(app, http=http, loop=loop, lifespan="off", log_level="warning", access_log=False)
    config.server_header = config.date_header = False
    server = uvicorn.Server(config)
    sock = bind("127.0.0.1", 0)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
            time.sleep(0.01)
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def request(path: bytes, body: bytes, *extra: bytes) -> bytes:
    head = b"POST %s HTTP/1.1\r\nhost: t\r\ncontent-length: %d\r\n" % (path, len(body))
    return head + b"".join(line + b"\r\n" for line in extra) + b"\r\n" + body


Answer = tuple[int, dict[bytes, bytes], bytes]


def read_responses(sock: socket.socket, count: int, timeout: float = 5.0) -> list[Answer]:
    """``count`` whole responses (content-length framed) from ``sock``."""
    deadline = time.monotonic() + timeout
    data = b""
    out: list[Answer] = []
    while len(out) < count:
        while b"\r\n\r\n" in data:
            head, _, rest = data.partition(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:])}
            size = int(headers.get(b"content-length", b"0"))
            if len(rest) < size:
                break
            out.append((int(lines[0].split()[1]), headers, rest[:size]))
            data = rest[size:]
            if len(out) == count:
                return out
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"got {len(out)} of {count} responses: {data!r}"
        sock.settimeout(remaining)
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection after {len(out)} of {count} responses"
        data += chunk
    return out


@pytest.mark.parametrize("loop", LOOPS)
def test_an_invocation_is_answered_without_asgi_and_others_with_it(loop: str) -> None:
    app = FakePlane()
    with serving(app, loop) as port, socket.create_connection(("127.0.0.1", port)) as sock:
        for _ in range(3):  # kept alive: several on one connection
            sock.sendall(request(INVOKE, b"row"))
            headers = {b"content-type": b"text/plain", b"content-length": b"8"}
            assert read_responses(sock, 1) == [(200, headers, b"fast:row")]
        sock.sendall(request(b"/ping", b"x"))
        assert read_responses(sock, 1)[0][2] == b"asgi:x"
    assert app.fast == [("/endpoints/ep/invocations", b"row")] * 3
    assert app.asgi == ["/ping"]


@pytest.mark.parametrize("loop", LOOPS)
def test_pipelined_requests_are_answered_in_order_across_both_paths(loop: str) -> None:
    app = FakePlane()
    app.release.clear()  # the first (fast) answer waits while the others arrive behind it
    with serving(app, loop) as port, socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(request(INVOKE, b"1") + request(b"/other", b"2") + request(INVOKE, b"3"))
        deadline = time.monotonic() + 5
        while not app.fast:
            assert time.monotonic() < deadline, "the first request never reached the plane"
            time.sleep(0.005)
        app.release.set()
        bodies = [body for _, _, body in read_responses(sock, 3)]
    assert bodies == [b"fast:1", b"asgi:2", b"asgi:3"]  # behind another request, an invocation takes uvicorn's path


@pytest.mark.parametrize("loop", LOOPS)
def test_what_the_fast_path_leaves_to_uvicorn(loop: str) -> None:
    app = FakePlane()
    with serving(app, loop) as port, socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(request(INVOKE + b"?x=1", b"q"))  # a query: SigV4 signs it; the ASGI path keeps it
        assert read_responses(sock, 1)[0][2] == b"asgi:q"
        sock.sendall(request(INVOKE, b"e", b"expect: 100-continue"))
        got = read_responses(sock, 2)
        assert [status for status, _, _ in got] == [100, 200] and got[1][2] == b"asgi:e"
        sock.sendall(request(INVOKE, b"c", b"connection: close"))
        assert read_responses(sock, 1)[0][2] == b"asgi:c"
    assert app.fast == []
    assert app.asgi == ["/endpoints/ep/invocations"] * 3


@pytest.mark.parametrize("loop", LOOPS)
def test_an_oversized_body_is_413_and_the_connection_stays_usable(loop: str) -> None:
    app = FakePlane()
    with serving(app, loop, max_body=1000) as port, socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(request(INVOKE, b"x" * 5000))
        status, _, body = read_responses(sock, 1)[0]
        assert status == 413 and b"too large" in body
        sock.sendall(request(INVOKE, b"ok"))
        assert read_responses(sock, 1)[0][2] == b"fast:ok"
    assert app.fast == [("/endpoints/ep/invocations", b"ok")]  # the oversized body never reached the plane


@pytest.mark.parametrize("loop", LOOPS)
def test_a_failing_handler_is_a_500_not_a_dead_connection(loop: str) -> None:
    app = FakePlane(fail=True)
    with serving(app, loop) as port, socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(request(INVOKE, b"a"))
        assert read_responses(sock, 1)[0][0] == 500
        app.fail = False
        sock.sendall(request(INVOKE, b"b"))
        assert read_responses(sock, 1)[0][2] == b"fast:b"


def test_a_bare_asgi_app_is_not_a_plane() -> None:
    async def bare(scope: Any, receive: Any, send: Any) -> None:
        return None

    assert not is_plane(bare)
    assert is_plane(FakePlane())


# ---- the real plane: the fast path's answer is the ASGI path's, byte for byte but the request id ----------------


def signed(home: Path, port: int, path: str, body: bytes, service: str = "sagemaker") -> bytes:
    key = Credentials.load_or_create(home).first("admin")
    aws = AWSRequest("POST", f"http://127.0.0.1:{port}{path}", data=body, headers={"Content-Type": "application/json"})
    SigV4Auth(BotoCredentials(key.access_key_id, key.secret_access_key), service, "us-east-1").add_auth(aws)
    head = b"POST %s HTTP/1.1\r\nhost: 127.0.0.1:%d\r\ncontent-length: %d\r\n" % (path.encode(), port, len(body))
    head += b"".join(b"%s: %s\r\n" % (k.lower().encode(), v.encode()) for k, v in aws.headers.items())
    return head + b"\r\n" + body


def _unsigned(body: bytes) -> bytes:
    """A body less what differs between two signings: hashes, the signing time, the server's port."""
    body = re.sub(rb"[0-9a-f]{64}", b"<hash>", body)
    body = re.sub(rb"\d{8}T\d{6}Z", b"<time>", body)
    body = re.sub(rb"<RequestId>[^<]*</RequestId>", b"<id>", body)
    return re.sub(rb"127\.0\.0\.1:\d+", b"<host>", body)


def test_the_real_planes_fast_answer_is_its_asgi_answer(tmp_path: Path) -> None:
    home = tmp_path / "home"
    plane = build(home)
    assert is_plane(plane)
    seen: dict[bool, list[Answer]] = {}
    for fast in (True, False):
        with serving(plane, "asyncio", fast=fast) as port, socket.create_connection(("127.0.0.1", port)) as sock:
            # an endpoint that does not exist (SigV4 verified, then the gateway's answer), a bad signature, and an
            # S3 request whose path looks like an invocation (taken by the S3 front, never the fast path)
            sock.sendall(signed(home, port, "/endpoints/nope/invocations", b"[[1.0]]"))
            sock.sendall(signed(home, port, "/endpoints/nope/invocations", b"[[1.0]]").replace(b"[[1.0]]", b"[[2.0]]"))
            sock.sendall(signed(home, port, "/endpoints/nope/invocations", b"", service="s3"))
            seen[fast] = read_responses(sock, 3)
    for (fast_status, fast_headers, fast_body), (status, headers, body) in zip(seen[True], seen[False], strict=True):
        assert fast_status == status
        assert {k: v for k, v in fast_headers.items() if k not in PER_REQUEST} == {
            k: v for k, v in headers.items() if k not in PER_REQUEST
        }
        assert _unsigned(fast_body) == _unsigned(body)
    statuses = [status for status, _, _ in seen[True]]
    assert statuses[0] == 400 and b"nope" in seen[True][0][2]  # the gateway's ValidationError names the endpoint
    assert statuses[1] == 403 and b"signature" in seen[True][1][2].lower()
    assert seen[True][2][2].startswith(b"<?xml")  # S3's own answer (XML), not InvokeEndpoint's
