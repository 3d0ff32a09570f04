"""A job's process limit where no pids cgroup can hold it (issue 44): the job runs as ``nobody`` outside its user
namespace (servekit as root), and RLIMIT_NPROC, set before it becomes ``nobody``, stops a fork bomb inside the job
with EAGAIN. Real bubblewrap, setpriv and prlimit."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from servekit.services.training import sandbox
from servekit.services.training.sandbox import JOB_UID, Layout, command, hand_over, runtime_for

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not all(shutil.which(t) for t in ("bwrap", "setpriv", "prlimit")),
    reason="the limit is for jobs that run as nobody: servekit as root, with bubblewrap, setpriv and prlimit",
)

FORK = """
import os, sys, time
count = 0
try:
    while count < 1000:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        count += 1
except OSError as exc:
    print("refused after", count, exc.strerror, flush=True)
    sys.exit(0)
print("forked", count, flush=True)
sys.exit(1)
"""


def test_without_a_cgroup_the_job_stops_at_its_process_limit(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ml = home / "jobs" / "j" / "ml"
    ml.mkdir(parents=True)
    running = sum(1 for p in Path("/proc").iterdir() if p.name.isdigit() and p.stat().st_uid == JOB_UID)
    limit = running + 40  # RLIMIT_NPROC counts every process of nobody on this machine
    layout = Layout(ml, hidden=[home], runtime=runtime_for(sys.executable, [home]), nproc=limit)
    hand_over(layout, JOB_UID)
    argv = command(layout, [sys.executable, "-c", FORK], shutil.which("bwrap") or "bwrap", JOB_UID)
    assert f"--nproc={limit}:{limit}" in argv
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env={"PATH": os.environ["PATH"]})
    assert done.returncode == 0, done.stdout + done.stderr
    said = done.stdout.split()
    assert said[:2] == ["refused", "after"] and int(said[2]) <= 40, done.stdout
    assert sandbox.job_uid() == JOB_UID
