"""The sandbox's command line and the files it hands a job (issue 44): root inside a user namespace of its own,
``nobody`` outside when servekit runs as root; folders on the private tmpfs mounts open to that user; writable
folders the job's own, with no file linked from elsewhere; an install ``nobody`` cannot read refused with the
reason. Command lines are checked as data here; tests/e2e/test_hostile_jobs.py runs them."""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

from servekit.services.training import sandbox
from servekit.services.training.network import JobNetwork
from servekit.services.training.sandbox import JOB_UID, Layout, command, hand_over

ROOT = os.geteuid() == 0


def _after(argv: list[str], flag: str) -> list[str]:
    return argv[argv.index(flag) + 1 :]


def test_as_root_the_job_becomes_nobody_in_an_inner_sandbox(tmp_path: Path) -> None:
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed")  # the runner refuses the job then: bwrap()'s test below
    layout = Layout(tmp_path / "ml", seccomp=tmp_path / "f.bpf")
    argv = command(layout, ["python3", "train.py"], "bwrap", JOB_UID)
    outer, inner = argv[: argv.index("--reuid=65534")], argv[argv.index("--reuid=65534") :]
    # the outer sandbox (root: it mounts what root can read) keeps only what setpriv needs, loads no filter
    assert outer[outer.index("--cap-drop") + 1 :][:5] == ["ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    assert "--seccomp" not in outer and "--unshare-user" not in outer
    # the inner one: a user namespace where the job is root, every capability dropped, the filter loaded
    assert inner[inner.index("bwrap") + 1 :][:5] == ["--unshare-user", "--uid", "0", "--gid", "0"]
    assert ["--cap-drop", "ALL"] == _after(inner, "--die-with-parent")[:2]
    assert _after(inner, "--seccomp")[0] == "9"
    assert inner[-3:] == ["--", "python3", "train.py"]


def test_as_a_user_one_sandbox_makes_the_user_namespace(tmp_path: Path) -> None:
    argv = command(Layout(tmp_path / "ml", seccomp=tmp_path / "f.bpf"), ["true"], "bwrap", None)
    bwrap = argv[argv.index("bwrap") :]
    assert bwrap[1:6] == ["--unshare-user", "--uid", "0", "--gid", "0"]
    assert argv.count("bwrap") == 1 and "--seccomp" in bwrap and not any("setpriv" in a for a in argv)
    assert _after(bwrap, "--cap-drop")[0] == "ALL" and "--cap-add" not in bwrap


def test_the_process_limit_is_set_before_the_jobs_user_namespace_is_made(tmp_path: Path) -> None:
    """Without a cgroup, RLIMIT_NPROC: as a user, before the one bubblewrap (inside the job's network namespace, which
    nsenter enters first); as root, before setpriv becomes nobody; with a cgroup, none."""
    if shutil.which("prlimit") is None:
        pytest.skip("prlimit (util-linux) is not installed")
    net = JobNetwork(("nsenter", "--user=/proc/1/fd/3", "--net=/proc/1/fd/4", "--preserve-credentials", "--"), None)
    argv = command(Layout(tmp_path / "ml", nproc=2048, net=net), ["true"], "bwrap", None)
    assert argv[:5] == list(net.enter) and argv[6:9] == ["--nproc=2048:2048", "--", "bwrap"]
    assert argv[5].endswith("prlimit")
    if shutil.which("setpriv") is not None:
        argv = command(Layout(tmp_path / "ml", nproc=2048), ["true"], "bwrap", JOB_UID)
        limit = argv.index("--nproc=2048:2048")
        assert argv[limit + 1] == "--" and argv[limit + 2].endswith("setpriv") and argv[limit + 3] == "--reuid=65534"
    argv = command(Layout(tmp_path / "ml", nproc=2048, cgroup=tmp_path / "pids"), ["true"], "bwrap", None)
    assert not any(a.startswith("--nproc") for a in argv)


def test_the_users_home_is_private_and_the_folders_to_a_python_there_are_open(tmp_path: Path) -> None:
    roots = sandbox.private_roots()
    assert roots[:2] == ("/tmp", "/opt")
    home = str(Path.home())
    if home in roots:  # a user whose home is a real folder (not / or under /tmp)
        where = f"{home}/.pyenv/versions/3.11.7"
        argv = command(Layout(tmp_path / "ml", runtime=[where]), ["true"], "bwrap", None)
        assert ["--tmpfs", home] == argv[argv.index(home) - 1 : argv.index(home) + 1]
        made = [argv[i + 1] for i, a in enumerate(argv) if a == "--dir"]
        assert made == [f"{home}/.pyenv", f"{home}/.pyenv/versions"]
        at = argv.index(f"{home}/.pyenv")
        assert argv[at - 3 : at] == ["--perms", "0755", "--dir"]
    argv = command(Layout(tmp_path / "ml", tmp_bytes=1 << 30), ["true"], "bwrap", None)
    at = argv.index("/tmp")
    assert argv[at - 5 : at + 1] == ["--size", str(1 << 30), "--perms", "1777", "--tmpfs", "/tmp"]


def test_hand_over_replaces_linked_files_and_gives_the_job_its_folders(tmp_path: Path) -> None:
    stored = tmp_path / "s3" / "ckpt-1.pt"  # an S3 object a restore linked into the job's checkpoints
    stored.parent.mkdir()
    stored.write_bytes(b"stored")
    ml = tmp_path / "ml"
    (ml / "checkpoints").mkdir(parents=True)
    os.link(stored, ml / "checkpoints" / "ckpt-1.pt")
    channel = tmp_path / "channels" / "train"
    channel.mkdir(parents=True)
    (channel / "data.csv").write_text("1,2\n")
    (channel / "data.csv").chmod(0o600)
    layout = Layout(ml, channels={"train": channel})
    hand_over(layout, JOB_UID if ROOT else None)
    copy = ml / "checkpoints" / "ckpt-1.pt"
    assert copy.read_bytes() == b"stored" and os.stat(copy).st_nlink == 1 and stored.stat().st_nlink == 1
    copy.write_bytes(b"written by the job")
    assert stored.read_bytes() == b"stored"  # the job's writes never reach the stored object
    assert (ml / "input" / "data" / "train").is_dir()  # its mount point, made before bubblewrap would
    if ROOT:
        assert {os.lstat(p).st_uid for p in [ml, ml / "checkpoints", copy, ml / "input" / "data"]} == {JOB_UID}
        assert (channel / "data.csv").stat().st_mode & stat.S_IROTH  # read-only input: readable, still root's
        assert (channel / "data.csv").stat().st_uid == 0


def test_an_install_nobody_can_read_is_refused_with_the_reason(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o700)
    python = locked / "python3"
    python.symlink_to(sys.executable)
    sandbox.unreadable_runtime.cache_clear()
    problem = sandbox.unreadable_runtime(str(python))
    if ROOT:
        assert problem is not None and str(locked) in problem and "drwx------" in problem
        with pytest.raises(sandbox.SandboxUnavailable, match="jobs cannot run from this install"):
            sandbox.runtime_for(str(python), [tmp_path / "home"])
    else:
        assert problem is None  # the job is this user outside: whatever it runs, this user can read
    locked.chmod(0o755)
    sandbox.unreadable_runtime.cache_clear()
    assert str(locked) not in (sandbox.unreadable_runtime(str(python)) or "")
