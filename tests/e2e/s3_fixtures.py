"""A real S3-compatible server for end-to-end tests: moto's server mode as its own process on a loopback port,
its log in a file the tests can read, and the AWS variables that point servekit (s3fs through botocore) at it.

The credentials are made up per run; moto accepts any. They go to servekit only through the environment, as a
user's would, so a test can check that they never come back in a log or an error message."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from servekit.backends.local import free_port


@dataclass
class S3Server:
    url: str
    access_key_id: str
    secret_access_key: str
    log_path: Path
    proc: subprocess.Popen[bytes]

    @property
    def env(self) -> dict[str, str]:
        """The variables a user exports to use this server (AWS_ENDPOINT_URL is botocore's own)."""
        return {
            "AWS_ENDPOINT_URL": self.url,
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.url,
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key,
            region_name="us-east-1",
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start_s3(log_path: Path, timeout_s: float = 60.0) -> S3Server:
    port = free_port()
    with open(log_path, "ab") as log:  # the child keeps its own descriptor
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
        )
    server = S3Server(
        f"http://127.0.0.1:{port}",
        f"AKIA{secrets.token_hex(8).upper()}",
        f"servekit-test-secret-{secrets.token_hex(16)}",
        log_path,
        proc,
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"moto server exited: {server.log()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{server.url}/moto-api/", timeout=2):
                return server
        except OSError:  # refused while it starts
            time.sleep(0.1)  # polling another process's readiness
    server.stop()
    raise TimeoutError("moto server did not answer")


@pytest.fixture
def s3_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    """A moto S3 server; the AWS variables point this process and every child it starts (servekit up, its
    instances, the CLI) at it."""
    server = start_s3(tmp_path / "moto.log")
    for key, value in server.env.items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    try:
        yield server
    finally:
        server.stop()
