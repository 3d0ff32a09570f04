"""The sandbox a job runs in: a private mount namespace (bubblewrap) where ``/opt/ml`` is the job's own folder, the
channels are read-only, the servekit home is hidden, and the rest of the machine is read-only (a script that writes
outside ``/opt/ml`` and ``/tmp`` fails with EROFS, as it would on a read-only container image).

``/tmp`` and ``/opt`` are private, empty tmpfs mounts in the sandbox, so a Python that lives under either (a new
user's virtualenv under ``/tmp``, ``/opt/conda``, ``/opt/venv``) is bound back read-only: the folders its
interpreter, prefixes and import path need (:func:`interpreter_paths`), and nothing else of those trees."""

from __future__ import annotations

import functools
import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from servekit.services.training import seccomp
from servekit.services.training.contract import CODE, DATA, ML

INSTALL_HINT = (
    "servekit runs training jobs in a bubblewrap sandbox that shows them /opt/ml, and bwrap is not installed: "
    "install it (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap) and start the job again"
)


BIN = "/opt/servekit/bin"  # on PATH first in the sandbox
PRIVATE = ("/tmp", "/opt")  # empty tmpfs mounts in every sandbox
# What every sandbox is, whoever starts it (root too: CI, a plane run as root):
# - dies with the runner (``--die-with-parent``) and holds no terminal (``--new-session``: no TIOCSTI);
# - its own pid namespace: the job sees and can signal only its own processes (not the plane: no kill, no
#   /proc/<plane>/root or fd/), and every process it started dies when its first one ends (a double-forked
#   process does not outlive the job);
# - its own IPC, UTS and (where the kernel has them) cgroup namespaces;
# - no capability, even as root (``--cap-drop ALL``): no mount or remount (the read-only machine stays read-only,
#   the hidden home stays hidden), no ptrace of others, no module, raw socket or chown of others' files; bubblewrap
#   also sets no_new_privs, so no setuid program gives them back.
ISOLATION = (
    "--die-with-parent",
    "--new-session",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    "--cap-drop",
    "ALL",
)


class SandboxUnavailable(RuntimeError):
    pass


def bwrap() -> str:
    found = shutil.which("bwrap")
    if found is None:
        raise SandboxUnavailable(INSTALL_HINT)
    return found


@dataclass(frozen=True)
class Layout:
    """Where a job's folders are on the host."""

    ml: Path  # mounted as /opt/ml (read-write)
    channels: Mapping[str, Path] = field(default_factory=dict)  # name -> a folder, mounted read-only
    code: Path | None = None  # mounted read-only at /opt/ml/code
    hidden: Sequence[Path] = ()  # folders the job must not see (the servekit home)
    # more folders: host path -> absolute path in the sandbox, and whether the job may write there (a processing
    # job's inputs and outputs at their LocalPath)
    mounts: Sequence[tuple[Path, str, bool]] = ()
    bin: Path | None = None  # mounted at BIN, first on PATH: python/python3 wrappers of servekit's interpreter
    hostname: str | None = None  # the job host's name (algo-1, ...), in its own UTS namespace
    hosts_file: Path | None = None  # mounted at /etc/hosts: every host of the job resolves to 127.0.0.1
    devices: Sequence[str] = ()  # device nodes bound into the sandbox's minimal /dev (a GPU host's /dev/nvidia*)
    # folders under /tmp or /opt the job's Python needs (:func:`runtime_binds`), bound back read-only
    runtime: Sequence[str] = ()
    # False: EnableNetworkIsolation, a network namespace of its own with only loopback (no route anywhere, the plane
    # and every port of this machine's 127.0.0.1 included), as SageMaker's isolated containers have none
    network: bool = True
    # the seccomp filter's file (:func:`seccomp_file`), read by the shell that execs bubblewrap: refused calls
    seccomp: Path | None = None
    # the private /tmp's size in bytes (the job's VolumeSizeInGB; None: as large as memory allows); what it holds
    # counts against the instance type's memory with the processes' (servekit._utils.processes.sandbox_memory)
    tmp_bytes: int | None = None
    # a pids cgroup (servekit._utils.cgroups) the shell that execs bubblewrap joins first: the host's process limit
    cgroup: Path | None = None


_PROBE = (
    "import json, sys; print(json.dumps([sys.executable, sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path]))"
)


def _symlink_chain(path: str) -> list[str]:
    """``path`` and every file its symbolic links lead through (a venv's python3 -> python3.11 -> /opt/...)."""
    chain, seen = [path], set()
    while os.path.islink(path) and path not in seen:
        seen.add(path)
        path = os.path.join(os.path.dirname(path), os.readlink(path))
        chain.append(os.path.normpath(path))
    chain.append(os.path.realpath(chain[0]))
    return chain


@functools.lru_cache(maxsize=16)
def interpreter_paths(python: str) -> tuple[str, ...]:
    """What ``python`` reads to start and import: its executable through its links, its prefixes and its
    ``sys.path`` (site-packages, an editable install's source folder). Asked of the interpreter itself (once per
    interpreter), or read from this process when it is servekit's own Python."""
    if os.path.abspath(python) == os.path.abspath(sys.executable):  # not realpath: a venv's python is a link
        found = [sys.executable, sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path]
    else:
        try:
            out = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=30, check=True)
            found = [str(p) for p in json.loads(out.stdout)]
        except (OSError, subprocess.SubprocessError, ValueError):
            found = []  # the job fails with its interpreter's own error, in its log
    paths = [*_symlink_chain(python), *found]
    return tuple(dict.fromkeys(os.path.abspath(p) for p in paths if p and os.path.isabs(p)))


def runtime_binds(paths: Iterable[str]) -> tuple[str, ...]:
    """The folders to bind back into a sandbox for ``paths``: those under ``/tmp`` or ``/opt`` (a file stands for
    its folder), without one inside another, and not ``/tmp`` or ``/opt`` themselves."""
    folders = set()
    for path in paths:
        folder = path if os.path.isdir(path) else os.path.dirname(path)
        if any(folder.startswith(root + "/") for root in PRIVATE) and os.path.exists(folder):
            folders.add(folder)
    return tuple(f for f in sorted(folders) if not any(f.startswith(other + "/") for other in folders))


def runtime_for(python: str, hidden: Iterable[Path]) -> tuple[str, ...]:
    """:func:`runtime_binds` for ``python``; raises :class:`SandboxUnavailable` when its executable lives inside a
    folder the sandbox hides (the servekit home), which no bind can show without showing the home."""
    problem = hidden_runtime(_symlink_chain(python), hidden)
    if problem is not None:
        raise SandboxUnavailable(problem)
    return runtime_binds(interpreter_paths(python))


def hidden_runtime(paths: Iterable[str], hidden: Iterable[Path]) -> str | None:
    """A path of the job's Python inside a folder the sandbox hides (the servekit home): the reason jobs cannot run
    from this install, or None."""
    for path in paths:
        for folder in hidden:
            if os.path.abspath(path).startswith(str(folder.absolute()) + "/"):
                return (
                    f"the job's Python needs {path}, which is inside the servekit home {folder} that jobs cannot "
                    "see: install servekit (its virtualenv) outside the home"
                )
    return None


def hosts_file(path: Path, hosts: Sequence[str]) -> Path:
    """An ``/etc/hosts`` where the job's hosts are this machine's loopback (they rendezvous there)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"127.0.0.1\tlocalhost {' '.join(hosts)}\n::1\tlocalhost ip6-localhost ip6-loopback\n")
    return path


def python_wrappers(folder: Path, python: str) -> Path:
    """``python`` and ``python3`` in ``folder`` that run ``python`` (a wrapper keeps a virtualenv's interpreter
    finding its own site-packages, which a bind of the binary would not)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("python", "python3"):
        wrapper = folder / name
        wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(python)} "$@"\n')
        wrapper.chmod(0o755)
    return folder


def seccomp_file(folder: Path) -> Path | None:
    """The job's seccomp filter (:mod:`servekit.services.training.seccomp`) written into ``folder``; None on a
    machine servekit has no table for."""
    code = seccomp.program()
    if code is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "seccomp.bpf"
    path.write_bytes(code)
    return path


# bubblewrap reads its filter from a descriptor: a shell opens the file as fd 9 and execs bubblewrap in its place
# (the same process, so stopping and signalling the sandbox are unchanged); it works the same on a Ray node. A shell
# that joins a cgroup first puts bubblewrap and everything under it there before any of them starts.
_JOIN_CGROUP = 'echo $$ > "$1/cgroup.procs" && shift'
_WITH_FILTER = 'exec 9<"$1" && shift'


def command(layout: Layout, argv: Sequence[str], bwrap_path: str = "bwrap") -> list[str]:
    """The bubblewrap command line that runs ``argv`` with ``layout`` mounted."""
    out = [bwrap_path, *ISOLATION, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    steps, args = [], []
    if layout.cgroup is not None:
        steps.append(_JOIN_CGROUP)
        args.append(str(layout.cgroup))
    if layout.seccomp is not None:
        steps.append(_WITH_FILTER)
        args.append(str(layout.seccomp))
        out += ["--seccomp", "9"]
    if steps:
        out = ["/bin/sh", "-c", " && ".join([*steps, 'exec "$@"']), "servekit-sandbox", *args, *out]
    if layout.tmp_bytes is not None:
        out += ["--size", str(layout.tmp_bytes)]
    out += ["--tmpfs", "/tmp", "--tmpfs", "/opt"]
    for where in layout.runtime:  # the job's Python, where it lives under /tmp or /opt
        out += ["--ro-bind", where, where]
    for node in layout.devices:  # absent nodes are skipped (a driver without nvidia-uvm-tools)
        out += ["--dev-bind-try", node, node]
    if not layout.network:
        out += ["--unshare-net"]
    if layout.hostname is not None:
        out += ["--hostname", layout.hostname]
    if layout.hosts_file is not None:
        out += ["--ro-bind", str(layout.hosts_file), "/etc/hosts"]
    for folder in layout.hidden:
        out += ["--tmpfs", str(folder)]
    out += ["--bind", str(layout.ml), ML]
    for name, folder in layout.channels.items():
        out += ["--ro-bind", str(folder), f"{DATA}/{name}"]
    if layout.code is not None:
        out += ["--ro-bind", str(layout.code), CODE]
    for source, target, writable in layout.mounts:
        out += ["--bind" if writable else "--ro-bind", str(source), target]
    if layout.bin is not None:  # `python3 script.py` (a processing entrypoint) means servekit's Python
        out += ["--ro-bind", str(layout.bin), BIN]
    out += ["--chdir", CODE if layout.code is not None else ML, "--", *argv]
    return out
