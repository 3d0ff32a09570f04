"""Network namespaces made by the plane (issue 44), as root and as an ordinary user (a helper process in a user
namespace of that user's): a socket listening in the namespace is reached by a command its prefix runs there and by
nothing outside; the helper ends with the process that made it, even one killed. Real unshare and nsenter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servekit._utils import netns
from servekit.testing.users import as_ordinary_user, why_not_ordinary_user

pytestmark = pytest.mark.skipif(not netns.available(), reason="this machine lets servekit make no network namespace")

PROBE = """
import json, os, signal, socket, subprocess, sys
from servekit._utils import netns
ns = netns.make()
listening = ns.socket(0)
port = listening.getsockname()[1]
inside = subprocess.run([*ns.enter(), sys.executable, "-c",
    f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5).close(); print('reached')"],
    capture_output=True, text=True)
try:
    socket.create_connection(("127.0.0.1", port), timeout=5).close()
    outside = True
except OSError:
    outside = False
made = ns.socket()
print(json.dumps({"inside": inside.stdout.strip(), "why": inside.stderr[-500:], "outside": outside,
    "socket": made.family == socket.AF_INET, "helper": ns.helper.proc.pid if ns.helper else None}), flush=True)
if sys.argv[1] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
ns.close()
"""


def _run(prefix: list[str], how: str, cwd: Path) -> dict[str, object]:
    done = subprocess.run([*prefix, sys.executable, "-c", PROBE, how], capture_output=True, text=True, cwd=cwd)
    assert done.stdout, done.stderr
    seen: dict[str, object] = json.loads(done.stdout.splitlines()[0])
    return seen


def _gone(pid: int) -> bool:
    deadline = time.monotonic() + 30
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.05)  # polling another process's end (it is not our child)
    return not os.path.exists(f"/proc/{pid}")


def test_a_namespace_of_the_tests_user(tmp_path: Path) -> None:
    seen = _run([], "close", tmp_path)
    assert seen["inside"] == "reached", seen["why"]
    assert seen["outside"] is False and seen["socket"] is True


def test_a_namespace_of_an_ordinary_user_ends_with_its_maker() -> None:
    why = why_not_ordinary_user()
    if why is not None:
        pytest.skip(why)
    for how in ("close", "kill"):
        seen = _run(as_ordinary_user(Path("/")), how, Path("/"))
        assert seen["inside"] == "reached", seen["why"]
        assert seen["outside"] is False and seen["socket"] is True
        assert isinstance(seen["helper"], int) and _gone(seen["helper"])
