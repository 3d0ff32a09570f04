"""``servekit serve`` on a port another process holds says so in one line and exits 2 (no traceback)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def test_a_busy_port_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        argv = ["serve", "--rest_api_port", str(port), "--port", "0", "--model_name", "m"]
        run = subprocess.run(
            [sys.executable, "-m", "servekit.cli.main", *argv, "--model_base_path", str(tmp_path / "m")],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert run.returncode == 2, run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert (
        lines[-1] == f"servekit: cannot listen on 127.0.0.1:{port}: another process listens there (choose another port)"
    )
    assert "Traceback" not in run.stderr and "OSError" not in run.stderr


def test_servekit_up_on_a_busy_port_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """``servekit up`` binds its port itself (launch/accept.py hands uvloop copies of the socket) and says so
    the same way."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        run = subprocess.run(
            [sys.executable, "-m", "servekit.cli.main", "up", "--home", str(tmp_path / "home"), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert run.returncode == 2, run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert (
        lines[-1] == f"servekit: cannot listen on 127.0.0.1:{port}: another process listens there (choose another port)"
    )
    assert "Traceback" not in run.stderr and "OSError" not in run.stderr
