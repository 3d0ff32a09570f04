from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from servekit.testing.hosting import UpProcess


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ServerProcess:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 60.0, path: str = "/v2/health/ready") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"servekit exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if requests.get(self.url + path, timeout=1).status_code == 200:
                    return
            except (requests.ConnectionError, requests.Timeout):  # with --workers the socket listens early
                pass
            time.sleep(0.1)
        raise AssertionError(f"servekit not ready after {timeout}s:\n{self.log()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_server(args: list[str], log_path: Path, port: int | None = None) -> ServerProcess:
    port = port or free_port()
    with log_path.open("wb") as log:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "servekit.cli.main",
                "serve",
                "--host",
                "127.0.0.1",
                "--rest_api_port",
                str(port),
                *args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    return ServerProcess(proc, port, log_path)


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[object]:
    started: list[ServerProcess] = []

    def make(*args: str, port: int | None = None) -> ServerProcess:
        srv = start_server(list(args), tmp_path / f"server-{len(started)}.log", port)
        started.append(srv)
        return srv

    yield make
    for srv in started:
        srv.stop()


@pytest.fixture(scope="module")
def module_server_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """Like ``server_factory`` but the servers live for the whole module (one start shared by its tests)."""
    logs = tmp_path_factory.mktemp("server-logs")
    started: list[ServerProcess] = []

    def make(*args: str, port: int | None = None) -> ServerProcess:
        srv = start_server(list(args), logs / f"server-{len(started)}.log", port)
        started.append(srv)
        return srv

    yield make
    for srv in started:
        srv.stop()


@pytest.fixture
def up(tmp_path: Path) -> Iterator[UpProcess]:
    """A real ``servekit up`` with a home of its own, stopped after the test."""
    u = UpProcess(tmp_path / "home")
    u.start()
    try:
        yield u
    finally:
        u.stop()
