"""``servekit serve`` sets TCP_NODELAY on the connections it accepts, whatever the event loop and HTTP parser:
without it a small response waits on Nagle's algorithm for the client's delayed ACK (~40 ms a request on Linux).

The option is read on the server's own socket: the test takes a duplicate of the server process's descriptor for
the connection it opened (Linux ``pidfd_getfd``, allowed to the parent of the process) and asks it. No timing: the
latency this buys is measured in ``benchmarks/http_stack_bench.py``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import sys
from pathlib import Path

import pytest
import requests
from tests.e2e.conftest import start_server

pytestmark = pytest.mark.e2e

SYS_PIDFD_GETFD = 438  # the same number on every Linux architecture (syscall table unification)


def _server_side_nodelay(pid: int, client: socket.socket) -> int:
    """TCP_NODELAY of the server process's socket whose peer is ``client``."""
    libc = ctypes.CDLL(None, use_errno=True)
    wanted = client.getsockname()
    pidfd = os.pidfd_open(pid)
    try:
        for name in os.listdir(f"/proc/{pid}/fd"):
            try:
                if not os.readlink(f"/proc/{pid}/fd/{name}").startswith("socket:"):
                    continue
            except OSError:  # closed meanwhile
                continue
            fd = libc.syscall(SYS_PIDFD_GETFD, pidfd, int(name), 0)
            if fd < 0:
                err = ctypes.get_errno()
                if err in (errno.ENOSYS, errno.EPERM):
                    pytest.skip(f"pidfd_getfd unavailable here ({os.strerror(err)})")
                continue
            with socket.socket(fileno=fd) as dup:
                if dup.type != socket.SOCK_STREAM or dup.family != client.family:
                    continue
                try:
                    peer = dup.getpeername()
                except OSError:  # the listening socket
                    continue
                if peer == wanted:
                    return dup.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    finally:
        os.close(pidfd)
    raise AssertionError(f"no socket in process {pid} is connected to {wanted}")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the server's socket with pidfd_getfd")
@pytest.mark.parametrize(("loop", "http"), [("asyncio", "h11"), ("auto", "auto")])
def test_accepted_connections_have_tcp_nodelay(demo_repo: Path, tmp_path: Path, loop: str, http: str) -> None:
    srv = start_server(
        [
            *("--model_base_path", str(demo_repo / "iris"), "--model_name", "iris"),
            *("--file_system_poll_wait_seconds", "0", "--loop", loop, "--http", http),
        ],
        tmp_path / "serve.log",
    )
    try:
        srv.wait_ready()
        expected = "event loop asyncio, HTTP parser h11" if loop == "asyncio" else "event loop uvloop, HTTP parser"
        assert expected in srv.log()
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as client:
            body = b'{"instances": [[5.9, 3.0, 4.2, 1.5]]}'
            client.sendall(
                b"POST /v1/models/iris:predict HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n%s" % (len(body), body)
            )
            assert client.recv(65536).startswith(b"HTTP/1.1 200")
            assert _server_side_nodelay(srv.proc.pid, client) == 1
    finally:
        srv.stop()


def test_an_unknown_or_missing_stack_is_refused_at_the_edge(demo_repo: Path, tmp_path: Path) -> None:
    srv = start_server(["--model_base_path", str(demo_repo / "iris"), "--loop", "trio"], tmp_path / "bad.log")
    try:
        assert srv.proc.wait(timeout=60) == 2
        assert "--loop must be one of auto, asyncio, uvloop, got 'trio'" in srv.log()
    finally:
        srv.stop()
    with pytest.raises(requests.ConnectionError):
        requests.get(srv.url + "/v2/health/live", timeout=2)
