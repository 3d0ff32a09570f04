"""The exec wrapper that ties a serving process to its Ray actor (``tied_command``), with real processes: a stand-in
actor starts a long sleep through it and is SIGKILLed, and the sleep must end too. Not a unit test: it starts a
parent and a child process and polls their /proc entries (tests/unit/backends/test_ray_backend_unit.py tests the
command line)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_a_tied_process_dies_with_its_parent(tmp_path: Path) -> None:
    """A stand-in actor (a Python parent) starts a long sleep through the wrapper and is then SIGKILLed: the sleep
    must end too, as a serving process must when Ray kills its actor or loses its node."""
    pidfile = tmp_path / "child.pid"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, subprocess, sys, time\n"
            "from servekit.backends.ray_actors import tied_command\n"
            "cmd = tied_command([sys.executable, '-c', 'import time; time.sleep(600)'], os.getpid(), sys.executable,"
            " True)\n"
            "p = subprocess.Popen(cmd, start_new_session=True)\n"
            f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
            "time.sleep(600)\n",
        ]
    )
    try:
        deadline = time.monotonic() + 30
        while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)  # polling the other process's pid file
        child = int(pidfile.read_text())
        while "prctl" in _cmdline(child) or "time.sleep(600)" not in _cmdline(child):  # until the wrapper exec'd
            assert time.monotonic() < deadline, "the wrapper did not exec the command"
            time.sleep(0.05)
        assert _alive(child)
        parent.kill()
        parent.wait(10)
        while _alive(child):
            assert time.monotonic() < deadline, "the tied process outlived its parent"
            time.sleep(0.05)
    finally:
        parent.kill()
        parent.wait(10)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
