"""A job's Python wherever it is installed (issue 44): a virtualenv under /tmp (a new user's fresh clone) or under
/opt (/opt/venv, /opt/conda in images) runs in the sandbox, whose /tmp and /opt are private tmpfs mounts, while
the servekit home stays hidden. Real bubblewrap, a real virtualenv over this interpreter's packages."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

import pytest

from servekit.services.training import sandbox
from servekit.services.training.sandbox import Layout, command, python_wrappers, runtime_for

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed (make install)")

PROBE = (
    "import os, sys, numpy, servekit; print(sys.prefix); "
    "print(os.path.exists(sys.argv[1]), os.listdir(sys.argv[2]) if os.path.isdir(sys.argv[2]) else 'gone')"
)


def _venv(where: Path) -> str:
    """A virtualenv at ``where`` that sees this interpreter's packages (servekit, numpy): what a user's venv holds."""
    venv.EnvBuilder(system_site_packages=True, with_pip=False, symlinks=True).create(where)
    # the base interpreter's site-packages (where servekit is installed here) are not on a venv's path on their own
    # when this interpreter is itself a venv; a .pth adds this process's path, as `pip install` into it would
    site = next((where / "lib").glob("python*/site-packages"))
    (site / "servekit_test.pth").write_text("\n".join(p for p in sys.path if p and os.path.isdir(p)) + "\n")
    return str(where / "bin" / "python3")


def _run_in_sandbox(python: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    home = tmp / "home"
    (home / "secret").mkdir(parents=True)
    (home / "credentials.json").write_text("{}")
    ml = home / "jobs" / "j" / "ml"
    ml.mkdir(parents=True)
    bin_dir = python_wrappers(home / "jobs" / "j" / "bin", python)
    layout = Layout(ml, hidden=[home], bin=bin_dir, runtime=runtime_for(python, [home]))
    argv = ["python3", "-c", PROBE, str(home / "credentials.json"), str(home)]
    env = {"PATH": f"{sandbox.BIN}:/usr/bin:/bin"}
    uid = sandbox.job_uid()  # as the runners do: nobody outside when this runs as root
    sandbox.hand_over(layout, uid)
    return subprocess.run(command(layout, argv, shutil.which("bwrap") or "bwrap", uid), env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def test_a_virtualenv_under_tmp_runs_in_the_sandbox(tmp_path: Path) -> None:
    assert str(tmp_path).startswith("/tmp/"), "pytest's tmp_path is where a new user's clone would be"
    python = _venv(tmp_path / "venv")
    done = _run_in_sandbox(python, tmp_path)
    assert done.returncode == 0, done.stderr
    prefix, seen = done.stdout.splitlines()
    assert prefix == str(tmp_path / "venv")
    assert seen == "False []"  # the home is an empty tmpfs: no credentials, no other jobs


@pytest.mark.skipif(not os.access("/opt", os.W_OK), reason="needs a writable /opt (root, as in CI)")
def test_a_virtualenv_under_opt_runs_in_the_sandbox(tmp_path: Path) -> None:
    where = Path(tempfile.mkdtemp(prefix="servekit-test-venv-", dir="/opt"))
    try:
        done = _run_in_sandbox(_venv(where / "venv"), tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[0] == str(where / "venv")
    finally:
        shutil.rmtree(where)


def test_a_python_inside_the_home_is_refused_before_the_job_starts(tmp_path: Path) -> None:
    home = tmp_path / "home"
    python = _venv(home / "venv")
    with pytest.raises(sandbox.SandboxUnavailable, match="inside the servekit home"):
        runtime_for(python, [home])
