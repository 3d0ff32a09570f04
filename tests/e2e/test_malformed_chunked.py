"""Malformed chunked bodies sent over a raw socket to a real ``servekit serve``: each gets its 400, and the server
counts it as a client's doing (``status="CANCELLED"``, never ``INTERNAL``) and logs one line at most for it, not a
``ClientDisconnect`` traceback that anyone could flood the log with."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

pytestmark = pytest.mark.e2e

# A chunk size that is not hex, a negative one, one far longer than any chunk-size line a parser accepts.
BAD_CHUNKS = (b"zz\r\nabc\r\n0\r\n\r\n", b"-1\r\nabc\r\n0\r\n\r\n", b"f" * 200 + b"\r\nabc\r\n0\r\n\r\n")
PATHS = ("/v1/models/iris:predict", "/v2/models/iris/infer", "/invocations")


def _send_raw(port: int, path: str, body: bytes) -> bytes:
    """The whole answer the server gives before it closes the connection (bounded by the socket timeout)."""
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head.encode() + body)
        while chunk := s.recv(65536):
            answer += chunk
    return answer


def _status_counts(url: str) -> dict[str, float]:
    counts: dict[str, float] = {}
    for line in requests.get(url + "/metrics", timeout=10).text.splitlines():
        m = re.match(r'servekit_requests_total\{.*status="(\w+)".*\} (\S+)$', line)
        if m:
            counts[m[1]] = counts.get(m[1], 0.0) + float(m[2])
    return counts


@pytest.mark.parametrize("http", ["httptools", "h11"])
def test_malformed_chunked_bodies_are_client_errors_logged_in_one_line(
    server_factory: Callable[..., Any], demo_repo: Path, http: str
) -> None:
    srv = server_factory(
        "--model_base_path", str(demo_repo / "iris"), "--model_name", "iris",
        "--file_system_poll_wait_seconds", "0", "--http", http,
    )  # fmt: skip
    srv.wait_ready()
    log_lines_before = len(srv.log().splitlines())
    sent = 0
    for path in PATHS:
        for body in BAD_CHUNKS:
            answer = _send_raw(srv.port, path, body)
            assert answer.startswith(b"HTTP/1.1 400 "), (path, body[:10], answer[:200])
            sent += 1

    # The app sees each request end (its handler runs once the headers are in): wait until all are counted.
    deadline = time.monotonic() + 10
    while sum(_status_counts(srv.url).values()) < sent:
        assert time.monotonic() < deadline, f"not all {sent} requests counted: {_status_counts(srv.url)}"
        time.sleep(0.05)
    counts = _status_counts(srv.url)
    assert "INTERNAL" not in counts, counts
    assert counts.get("CANCELLED") == sent, counts

    new_lines = srv.log().splitlines()[log_lines_before:]
    assert not any("Traceback" in line or "ClientDisconnect" in line for line in new_lines), "\n".join(new_lines)
    assert len(new_lines) <= sent, "\n".join(new_lines)
