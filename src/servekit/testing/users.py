"""servekit run as an ordinary user from tests that run as root (CI, a container): what a user who installed servekit
in a virtualenv of their own would run, without needing such a user on the machine.

The command prefix :func:`as_ordinary_user` builds enters a mount namespace of its own (``unshare --mount``) where
each folder on the way to this Python that other users cannot enter (root's ``0700`` home, where pyenv lives) is
covered by an empty folder holding only what the interpreter reads, bound back; then ``setpriv`` becomes the user,
with no capability, and execs the command (one process: a signal to it reaches the command)."""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

ORDINARY_UID = 54321  # no user of the machine: a plane's files and processes are its alone


def _interpreter_paths() -> list[str]:
    paths = [sys.executable, os.path.realpath(sys.executable), sys.prefix, sys.base_prefix, *sys.path]
    return list(dict.fromkeys(os.path.abspath(p) for p in paths if p and os.path.isabs(p) and os.path.exists(p)))


def _closed_folder(path: str) -> str | None:
    """The first folder on the way to ``path`` that other users cannot enter, or None."""
    walked = Path("/")
    for part in Path(path).parts[1:]:
        walked = walked / part
        if walked.is_dir() and not os.stat(walked).st_mode & stat.S_IXOTH:
            return str(walked)
    return None


def why_not_ordinary_user(uid: int = ORDINARY_UID) -> str | None:
    """Why this machine cannot run a command as the ordinary user ``uid`` in a user namespace of its own (what
    servekit's jobs and networks need), or None when it can."""
    if os.geteuid() != 0:
        return "the tests run as an ordinary user already (becoming another needs root)"
    tools = ("unshare", "setpriv", "mount", "nsenter", "bwrap")
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        return f"missing {', '.join(missing)}"
    probe = [*as_ordinary_user(Path("/"), uid), "unshare", "--user", "--map-root-user", "--net", "true"]
    done = subprocess.run(probe, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        return f"an ordinary user may not make user namespaces here: {done.stderr.strip()}"
    return None


def as_ordinary_user(home: Path, uid: int = ORDINARY_UID) -> list[str]:
    """The command prefix (run as root) that runs a command as ``uid`` with ``HOME=home``, this Python readable."""
    paths = _interpreter_paths()
    covers: dict[str, list[str]] = {}
    for p in paths:
        closed = _closed_folder(p)
        if closed is not None and closed != p:
            covers.setdefault(closed, []).append(p)
    steps = ["set -e"]
    for n, (closed, inside) in enumerate(sorted(covers.items())):
        # an empty tmpfs made aside, the interpreter's folders bound into it from where they are, then moved over
        # the closed folder (binding after covering could not reach them)
        stage = f"/run/servekit-user-{os.getpid()}-{n}"
        steps += [f"mkdir -p {stage}", f"mount -t tmpfs -o mode=755 servekit {stage}"]
        folders = {p if os.path.isdir(p) else os.path.dirname(p) for p in inside}
        for folder in sorted(f for f in folders if not any(f.startswith(o + "/") for o in folders)):
            target = shlex.quote(f"{stage}/{os.path.relpath(folder, closed)}")
            steps += [f"mkdir -p {target}", f"mount --rbind {shlex.quote(folder)} {target}"]
        steps += [f"mount --move {stage} {shlex.quote(closed)}", f"rmdir {stage} 2>/dev/null || true"]
    steps.append(
        f"exec setpriv --reuid={uid} --regid={uid} --clear-groups --inh-caps=-all "
        f'env HOME={shlex.quote(str(home))} USER=servekit-test LOGNAME=servekit-test "$@"'
    )
    unshare = shutil.which("unshare") or "unshare"
    return [unshare, "--mount", "--propagation", "private", "--", "/bin/sh", "-c", "\n".join(steps), "servekit-user"]


def ordinary_user_home(uid: int = ORDINARY_UID) -> Path:
    """A new home folder that ``uid`` owns, under ``/home`` as a user's is (``/tmp`` where there is none); the
    caller removes it."""
    parent = "/home" if os.path.isdir("/home") else None
    folder = Path(tempfile.mkdtemp(prefix="servekit-user-", dir=parent))
    os.chown(folder, uid, uid)
    folder.chmod(0o755)
    return folder
