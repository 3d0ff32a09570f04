"""``servekit serve`` as a real process against careless and hostile clients: connections that never finish are
closed within the configured timeouts while a normal client is served throughout, the connection cap refuses
at once, authentication guards everything but health checks, and the default address is loopback.

Every wait is bounded: sockets are read with deadlines and conditions are polled with one.
"""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

pytestmark = pytest.mark.e2e

ROW = [5.9, 3.0, 4.2, 1.5]
TIMEOUTS = ("--idle_timeout_seconds", "1", "--header_timeout_seconds", "1", "--body_timeout_seconds", "1")
NO_POLL = ("--file_system_poll_wait_seconds", "0")
INFERENCE_TOKEN = "inf-" + "a" * 28
ADMIN_TOKEN = "adm-" + "b" * 28
BOTH_TOKEN = "both-" + "c" * 27


def _iris(demo_repo: Path) -> tuple[str, ...]:
    return ("--model_base_path", str(demo_repo / "iris"), "--model_name", "iris", *NO_POLL)


def _wait(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _socket_fds(pid: int) -> int:
    fd_dir = Path(f"/proc/{pid}/fd")
    count = 0
    for fd in fd_dir.iterdir():
        try:
            count += os.readlink(fd).startswith("socket:")
        except OSError:  # closed meanwhile
            pass
    return count


class NormalClient:
    """Predicts on fresh connections until stopped; every request must succeed within 2 s."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.stop = threading.Event()
        self.served = 0
        self.failures: list[str] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                with requests.Session() as s:
                    r = s.post(f"{self.url}/v1/models/iris:predict", json={"instances": [ROW]}, timeout=2)
                if r.status_code == 200:
                    self.served += 1
                else:
                    self.failures.append(f"{r.status_code} {r.text}")
            except requests.RequestException as exc:
                self.failures.append(repr(exc))
            self.stop.wait(0.05)  # pacing, not synchronisation

    def __enter__(self) -> NormalClient:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self._thread.join(5)


def test_idle_slowloris_and_stalled_body_connections_are_closed_while_a_normal_client_is_served(
    server_factory: Callable[..., Any], demo_repo: Path
) -> None:
    srv = server_factory(*_iris(demo_repo), *TIMEOUTS)
    srv.wait_ready()
    pid: int = srv.proc.pid
    port: int = srv.port
    baseline = _socket_fds(pid)

    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
    slow = [socket.create_connection(("127.0.0.1", port)) for _ in range(10)]
    stalled = [socket.create_connection(("127.0.0.1", port)) for _ in range(10)]
    everyone = idle + slow + stalled
    try:
        for s in slow:
            s.sendall(b"POST /v1/models/iris:predict HTTP/1.1\r\nHost: x\r\n")
        for s in stalled:
            s.sendall(b"POST /v1/models/iris:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
        started = time.monotonic()
        received = dict.fromkeys(everyone, b"")
        closed_after: dict[socket.socket, float] = {}
        with NormalClient(srv.url) as normal:
            # One loop drives every socket: a header byte to each slowloris connection every 50 ms, and reads
            # whatever the server sends, until each has been answered and shut or the deadline passes.
            while len(closed_after) < len(everyone):
                assert time.monotonic() - started < 8, f"{len(everyone) - len(closed_after)} connections still open"
                waiting = [s for s in everyone if s not in closed_after]
                readable, _, _ = select.select(waiting, [], [], 0.05)
                for s in readable:
                    try:
                        chunk = s.recv(65536)
                    except ConnectionResetError:
                        chunk = b""
                    received[s] += chunk
                    if not chunk:
                        closed_after[s] = time.monotonic() - started
                for s in slow:
                    if s not in closed_after and not received[s]:
                        try:
                            s.send(b"X")
                        except OSError:
                            pass
        assert normal.failures == []
        assert normal.served > 0
        for s in idle:
            assert received[s] == b""
            assert 0.8 <= closed_after[s] < 4
        for s in slow + stalled:
            assert received[s].startswith(b"HTTP/1.1 408 "), received[s]
            assert 0.8 <= closed_after[s] < 4
        # The server let go of its ends on its own (the client still holds every socket open).
        _wait(lambda: _socket_fds(pid) <= baseline, f"socket fds back to {baseline} (now {_socket_fds(pid)})")
    finally:
        for s in everyone:
            s.close()
    assert "closed slow connections" in srv.log()


def test_connections_over_the_cap_get_503_with_retry_after_at_once(
    server_factory: Callable[..., Any], demo_repo: Path
) -> None:
    srv = server_factory(*_iris(demo_repo), "--max_connections", "4")
    srv.wait_ready()
    port: int = srv.port
    held = []
    try:
        for _ in range(4):  # each proves it was accepted by being served, then stays open (kept alive)
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            held.append(s)
            s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
            assert s.recv(65536).startswith(b"HTTP/1.1 200 ")
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=5) as extra:
            answer = b""
            while chunk := extra.recv(65536):
                answer += chunk
        assert time.monotonic() - started < 1.0
        assert answer.startswith(b"HTTP/1.1 503 "), answer
        assert b"\r\nretry-after: 1\r\n" in answer.lower()
    finally:
        for s in held:
            s.close()
    # Room again once they are gone.
    _wait(lambda: requests.get(srv.url + "/v2/health/live", timeout=2).status_code == 200, "a free slot")
    assert "connection cap reached" in srv.log()
    assert "--max_connections 4" in srv.log()


def test_bearer_tokens_guard_everything_but_health_checks(
    server_factory: Callable[..., Any], demo_repo: Path, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# servekit tokens\ninference:{INFERENCE_TOKEN}\nadmin: {ADMIN_TOKEN}\n{BOTH_TOKEN}\n")
    tokens.chmod(0o600)
    srv = server_factory(*_iris(demo_repo), "--auth_token_file", str(tokens), "--host", "0.0.0.0")
    srv.wait_ready()  # health checks need no token
    url: str = srv.url

    def call(method: str, path: str, token: str | None, body: object = None) -> requests.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return requests.request(method, url + path, headers=headers, json=body, timeout=5)

    for path in ("/v2/health/live", "/v2/health/ready", "/ping"):
        assert call("GET", path, None).status_code == 200, path
    predict = "/v1/models/iris:predict"
    body = {"instances": [ROW]}
    r = call("POST", predict, None, body)
    assert r.status_code == 401
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert "error" in r.json()
    assert call("POST", predict, "wrong-" + "z" * 26, body).status_code == 401
    assert call("POST", predict, INFERENCE_TOKEN, body).status_code == 200
    assert call("POST", predict, BOTH_TOKEN, body).status_code == 200
    assert call("POST", predict, ADMIN_TOKEN, body).status_code == 403
    assert call("GET", "/metrics", INFERENCE_TOKEN).status_code == 403
    assert call("GET", "/metrics", ADMIN_TOKEN).status_code == 200
    assert call("GET", "/v1/models/iris", None).status_code == 401
    assert call("GET", "/v1/models/iris", ADMIN_TOKEN).status_code == 200
    log = srv.log()
    assert "without authentication" not in log  # 0.0.0.0 with auth on: no warning
    for token in (INFERENCE_TOKEN, ADMIN_TOKEN, BOTH_TOKEN):
        assert token not in log


def test_serve_listens_on_loopback_by_default_and_warns_on_0_0_0_0_without_auth(
    demo_repo: Path, tmp_path: Path
) -> None:
    procs = []
    logs = [tmp_path / "default.log", tmp_path / "any.log"]
    try:
        for log, extra in zip(logs, [(), ("--host", "0.0.0.0")], strict=True):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            with log.open("wb") as out:
                cmd = [sys.executable, "-m", "servekit.cli.main", "serve", *_iris(demo_repo)]
                cmd += ["--rest_api_port", str(port), *extra]
                procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT))
        _wait(lambda: all("listening on http://" in log.read_text() for log in logs), "both servers to listen")
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(15)
    default, anywhere = (log.read_text() for log in logs)
    assert "listening on http://127.0.0.1:" in default
    assert "without authentication" not in default
    assert "listening on http://0.0.0.0:" in anywhere
    assert "listening on 0.0.0.0 without authentication" in anywhere
