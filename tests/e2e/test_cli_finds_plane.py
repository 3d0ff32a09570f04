"""The CLI finds the home's running ``servekit up`` where it listens (a port other than the default), without
``--url`` or ``$SERVEKIT_URL``; a given address still wins, and a stopped plane is named by the address tried."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from servekit.testing.hosting import UpProcess

pytestmark = pytest.mark.e2e


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SERVEKIT_URL", "SERVEKIT_HOME")}
    return subprocess.run(
        [sys.executable, "-m", "servekit.cli.main", *args, "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_commands_use_the_address_the_home_recorded(tmp_path: Path) -> None:
    up = UpProcess(tmp_path / "home")
    assert up.port != 8765
    up.start()
    try:
        listed = cli(up.home, "endpoint", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout) == {"Endpoints": []}
        elsewhere = cli(up.home, "endpoint", "list", "--url", "http://127.0.0.1:9")
        assert elsewhere.returncode == 1
        assert "cannot reach servekit up at http://127.0.0.1:9" in elsewhere.stderr
    finally:
        up.stop()
    stopped = cli(up.home, "endpoint", "list")
    assert stopped.returncode == 1
    assert f"cannot reach servekit up at {up.url}" in stopped.stderr  # the recorded address, not the default
