"""Models for hosting tests: tiny ``inference.py`` handler models that load in milliseconds and need no
framework, so a test can start real ``servekit serve`` instances by the dozen."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def until(check: Callable[[], Any], what: str, timeout: float = 120.0) -> Any:
    """Poll ``check`` until it returns something truthy (another process's progress: a job, an execution, a file
    shipped); AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def scaling_model(root: Path, name: str, factor: float, broken: bool = False) -> Path:
    """``<root>/<name>/1/code/inference.py``: a JSON list in, ``{"out": [x * factor, ...]}`` out; with ``broken``
    its ``model_fn`` raises ("weights file is corrupt"), so the version never loads. Returns the model base."""
    version = root / name / "1"
    (version / "code").mkdir(parents=True)
    body = "raise RuntimeError('weights file is corrupt')" if broken else f"return {factor}"
    (version / "code" / "inference.py").write_text(
        textwrap.dedent(
            f"""
            import json

            def model_fn(model_dir):
                {body}

            def transform_fn(model, data, content_type, accept):
                return json.dumps({{"out": [x * model for x in json.loads(data)]}}), "application/json"
            """
        )
    )
    return root / name


class UpProcess:
    """A real ``servekit up`` on a free loopback port with its own home, for end-to-end tests: ``start`` returns
    once ``/ping`` answers 200 (the process's own readiness, polled), ``kill`` is a SIGKILL, ``stop`` a SIGTERM."""

    def __init__(self, home: Path, *extra_args: str, prefix: Sequence[str] = (), user_home: Path | None = None) -> None:
        """``prefix``: a command prefix ``servekit up`` runs under (:func:`servekit.testing.users.as_ordinary_user`),
        which must exec it (its process is ``proc``); ``user_home``: the home folder of the user it runs as."""
        from servekit.backends.local import free_port

        self.home = home
        self.prefix = list(prefix)
        self.user_home = user_home if user_home is not None else Path.home()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = home.parent / "up.log"
        self._extra = extra_args
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 120.0) -> None:
        cmd = [sys.executable, "-m", "servekit.cli.main", "up", "--home", str(self.home), "--port", str(self.port)]
        with open(self.log, "ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen([*self.prefix, *cmd, *self._extra], stdout=log, stderr=log)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"servekit up exited: {self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/ping", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:  # refused while it starts, or 503 until its endpoints are back
                pass
            time.sleep(0.1)  # polling another process's readiness
        raise TimeoutError("servekit up did not answer /ping")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def client(self, service: str) -> Any:
        """A botocore client for ``service`` signed with this home's admin key."""
        from servekit.aws import client

        return client(self.home, service, self.url)

    def sm(self) -> Any:
        return self.client("sagemaker")

    def rt(self) -> Any:
        return self.client("sagemaker-runtime")
