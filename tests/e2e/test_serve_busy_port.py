"""``servekit serve`` and ``servekit up`` on a port another process holds say so in one line and exit 2 (no
traceback)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(
    "argv",
    [
        ["serve", "--rest_api_port", "{port}", "--port", "0", "--model_name", "m", "--model_base_path", "{tmp}/m"],
        # servekit up binds its port itself (launch/accept.py hands uvloop copies of the socket) and says so alike
        ["up", "--home", "{tmp}/home", "--port", "{port}"],
    ],
    ids=["serve", "up"],
)
def test_a_busy_port_is_one_line_and_exit_2(tmp_path: Path, argv: list[str]) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        args = [a.format(port=port, tmp=tmp_path) for a in argv]
        run = subprocess.run(
            [sys.executable, "-m", "servekit.cli.main", *args], capture_output=True, text=True, timeout=120
        )
    assert run.returncode == 2, run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert (
        lines[-1] == f"servekit: cannot listen on 127.0.0.1:{port}: another process listens there (choose another port)"
    )
    assert "Traceback" not in run.stderr and "OSError" not in run.stderr
