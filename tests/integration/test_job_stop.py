"""Stopping a job's sandbox (StopTrainingJob, MaxRuntimeInSeconds): SIGTERM reaches the script whenever the stop
lands, even while the sandbox is still starting it, and the job does not sit out its whole grace. Real bubblewrap."""

from __future__ import annotations

import asyncio
import shutil
import sys
from pathlib import Path

import pytest

from servekit.services.training.hosts import Running, run_sandboxed, sandbox_env
from servekit.services.training.sandbox import Layout, command, python_wrappers, runtime_for, seccomp_file

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed (make install)")

TRAPS_TERM = """
import signal, sys, time
def bye(signum, frame):
    open("/opt/ml/stopped", "w").write("saved")
    sys.exit(0)
signal.signal(signal.SIGTERM, bye)
print("ready", flush=True)
time.sleep(600)
"""
GRACE_S = 600.0  # far over the test's timeout: a stop that reached no one would sit it out and fail the test


def _argv(tmp_path: Path) -> list[str]:
    ml = tmp_path / "ml"
    ml.mkdir()
    layout = Layout(
        ml,
        bin=python_wrappers(tmp_path / "bin", sys.executable),
        runtime=runtime_for(sys.executable, []),
        seccomp=seccomp_file(tmp_path / "etc"),
    )
    return command(layout, ["python3", "-c", TRAPS_TERM], shutil.which("bwrap") or "bwrap")


def test_a_stop_before_the_script_starts_ends_the_sandbox_at_once(tmp_path: Path) -> None:
    async def main() -> tuple[int, bool]:
        run = Running()
        run.stop.set()  # lands before the sandbox has started anything
        return await run_sandboxed(_argv(tmp_path), sandbox_env({}), tmp_path / "log", 3600, run, GRACE_S)

    _, stopped = asyncio.run(main())
    assert stopped


def test_a_stop_while_the_script_runs_lets_it_save_then_ends(tmp_path: Path) -> None:
    async def main() -> tuple[int, bool]:
        run = Running()
        log = tmp_path / "log"
        task = asyncio.create_task(run_sandboxed(_argv(tmp_path), sandbox_env({}), log, 3600, run, GRACE_S))
        while "ready" not in (log.read_text() if log.exists() else ""):
            await asyncio.sleep(0.05)  # the script's own line is the event waited for
        run.stop.set()
        return await task

    code, stopped = asyncio.run(main())
    assert stopped and code == 0
    assert (tmp_path / "ml" / "stopped").read_text() == "saved"
