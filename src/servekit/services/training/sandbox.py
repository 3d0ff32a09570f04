"""The sandbox a job runs in: a private mount namespace (bubblewrap) where ``/opt/ml`` is the job's own folder, the
channels are read-only, the servekit home is hidden, and the rest of the machine is read-only (a script that writes
outside ``/opt/ml`` and ``/tmp`` fails with EROFS, as it would on a read-only container image).

``/tmp``, ``/opt`` and the home folder of the user servekit runs as (``/root``, ``/home/alice``: its ``.aws``,
``.ssh``) are private, empty tmpfs mounts in the sandbox, so a Python that lives under one (a new user's virtualenv
under ``/tmp`` or ``~``, ``/opt/conda``, ``/opt/venv``) is bound back read-only: the folders its interpreter,
prefixes and import path need (:func:`interpreter_paths`), and nothing else of those trees.

The job is root in a user namespace of its own, as in SageMaker's containers, and no one outside it: when servekit
runs as an ordinary user, root inside is that user; when it runs as root (CI, a system service), root inside is
:data:`JOB_UID` outside (``nobody``), which owns the job's writable folders (:func:`hand_over`) and nothing else on
the machine. Building the mounts needs root's view of the home (often ``0700``), so then bubblewrap runs twice: the
outer one, as root, mounts everything and keeps only CAP_SETUID/CAP_SETGID; ``setpriv`` becomes ``nobody``; the
inner one makes the user namespace, drops every capability and loads the seccomp filter."""

from __future__ import annotations

import functools
import json
import os
import pwd
import shlex
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from servekit.services.training import seccomp
from servekit.services.training.contract import CODE, DATA, ML
from servekit.services.training.network import JobNetwork

INSTALL_HINT = (
    "servekit runs training jobs in a bubblewrap sandbox that shows them /opt/ml, and bwrap is not installed: "
    "install it (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap) and start the job again"
)


BIN = "/opt/servekit/bin"  # on PATH first in the sandbox
PRIVATE = ("/tmp", "/opt")  # empty tmpfs mounts in every sandbox, with the user's home folder (private_roots)
JOB_UID = 65534  # nobody: who a job is outside its user namespace when servekit runs as root
SETPRIV_HINT = "servekit runs as root, so a job becomes an unprivileged user with setpriv (util-linux): install it"
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
)


# inside the user namespace: root, as SageMaker's containers run their scripts
_ROOT_INSIDE = ("--unshare-user", "--uid", "0", "--gid", "0")


class SandboxUnavailable(RuntimeError):
    pass


def job_uid() -> int | None:
    """Who jobs are outside their user namespace: :data:`JOB_UID` when servekit runs as root, else None (the user
    servekit runs as, who gains nothing by it)."""
    return JOB_UID if os.geteuid() == 0 else None


@functools.lru_cache(maxsize=1)
def private_roots() -> tuple[str, ...]:
    """The folders every sandbox covers with an empty tmpfs: :data:`PRIVATE` and the home folder of the user
    servekit runs as (where one exists and is not ``/``)."""
    try:
        home = pwd.getpwuid(os.geteuid()).pw_dir
    except KeyError:
        home = os.environ.get("HOME", "")
    home = os.path.abspath(home) if home else ""
    overlaps = any(_within(home, root) or _within(root, home) for root in PRIVATE)
    extra = (home,) if home and home != "/" and os.path.isdir(home) and not overlaps else ()
    return (*PRIVATE, *extra)


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def bwrap() -> str:
    found = shutil.which("bwrap")
    if found is None:
        raise SandboxUnavailable(INSTALL_HINT)
    if job_uid() is not None and shutil.which("setpriv") is None:
        raise SandboxUnavailable(SETPRIV_HINT)
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
    # the process limit where no cgroup holds one: RLIMIT_NPROC, set before the job's user namespace is made. The
    # kernel counts it per user namespace and up the chain: the job's own processes, then every process of its user
    # outside (JOB_UID's when servekit runs as root: all such jobs; else the plane user's, the plane's included), so
    # it is a cap on the job, and where the outside count is high, a lower one
    nproc: int | None = None
    # where the command starts (default /opt/ml/code when there is code, else /opt/ml)
    chdir: str | None = None
    # the job's network namespace (all its hosts in one), entered with nsenter before anything else, and its
    # resolv.conf; None: the sandbox makes its own for an isolated job, else shares this machine's
    net: JobNetwork | None = None


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


def runtime_binds(paths: Iterable[str], roots: Sequence[str] = PRIVATE) -> tuple[str, ...]:
    """The folders to bind back into a sandbox for ``paths``: those under one of ``roots`` (``/tmp``, ``/opt``,
    the user's home; a file stands for its folder), without one inside another, and not the roots themselves."""
    folders = set()
    for path in paths:
        folder = path if os.path.isdir(path) else os.path.dirname(path)
        if any(folder.startswith(root + "/") for root in roots) and os.path.exists(folder):
            folders.add(folder)
    return tuple(f for f in sorted(folders) if not any(f.startswith(other + "/") for other in folders))


def runtime_for(python: str, hidden: Iterable[Path]) -> tuple[str, ...]:
    """:func:`runtime_binds` for ``python``; raises :class:`SandboxUnavailable` when its executable lives inside a
    folder the sandbox hides (the servekit home), which no bind can show without showing the home, or when the job's
    unprivileged user (:func:`job_uid`) could not read it."""
    hidden = list(hidden)
    problem = hidden_runtime(_symlink_chain(python), hidden)
    if problem is None:
        problem = unreadable_runtime(python)
    if problem is not None:
        raise SandboxUnavailable(problem)
    return runtime_binds(interpreter_paths(python), private_roots())


@functools.lru_cache(maxsize=16)
def unreadable_runtime(python: str) -> str | None:
    """Where servekit runs as root, the first path of ``python``'s (:func:`interpreter_paths`) that a job, an
    unprivileged user outside its namespace, could not reach (a folder it cannot enter, an import folder it cannot
    list, an executable it cannot run), with the reason jobs cannot run from this install; else None. A folder
    bound back into the sandbox (under a private root) is reached from its bind, not through the root above it."""
    uid = job_uid()
    if uid is None:
        return None
    roots = private_roots()
    paths = interpreter_paths(python)
    binds = runtime_binds(paths, roots)
    for path in paths:
        if not os.path.exists(path):
            continue
        start = next((b for b in binds if _within(path, b)), "/")
        parts = Path(path).relative_to(start).parts if start != "/" else Path(path).parts[1:]
        walked = Path(start)
        steps = [walked] + [walked := walked / part for part in parts]
        for i, step in enumerate(steps):
            try:
                st = os.stat(step)
            except OSError:
                break
            last = i == len(steps) - 1
            need = stat.S_IXOTH | (stat.S_IROTH if last and stat.S_ISDIR(st.st_mode) else 0)
            if st.st_uid != uid and st.st_mode & need != need:
                return (
                    f"jobs cannot run from this install: servekit runs as root, so a job runs as the unprivileged "
                    f"user {uid} (nobody), and its Python needs {step} (mode {stat.filemode(st.st_mode)}, owner "
                    f"{st.st_uid}): install servekit where every user can read it, or run servekit up as an "
                    "ordinary user"
                )
    return None


def job_sandbox_problem(python: str, home: Path) -> str | None:
    """Why no job can run from this install (bubblewrap or setpriv missing, ``python`` inside the home or
    unreadable by the jobs' user), in one line; None when jobs can. What ``servekit up`` says when it starts."""
    try:
        bwrap()
        runtime_for(python, [home])
    except SandboxUnavailable as exc:
        return str(exc)
    return None


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


def command(layout: Layout, argv: Sequence[str], bwrap_path: str = "bwrap", uid: int | None = None) -> list[str]:
    """The bubblewrap command line that runs ``argv`` with ``layout`` mounted, as root in a user namespace that is
    ``uid`` outside (:func:`job_uid`; None: the user servekit runs as)."""
    caps = ["--cap-drop", "ALL"]
    if uid is not None:  # the outer sandbox, as root: what setpriv needs to become ``uid``, nothing else
        caps += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    out = [bwrap_path, *ISOLATION, *caps, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    if uid is None:
        out[1:1] = _ROOT_INSIDE
        out[0:0] = _nproc_limit(layout)  # before bubblewrap makes the job's user namespace, which keeps it as its own
    steps, args = [], []
    if layout.cgroup is not None:
        steps.append(_JOIN_CGROUP)
        args.append(str(layout.cgroup))
    seccomp_args: list[str] = []
    if layout.seccomp is not None:
        steps.append(_WITH_FILTER)
        args.append(str(layout.seccomp))
        seccomp_args = ["--seccomp", "9"]  # in the sandbox that runs the job (the inner one, as root)
    if uid is None:
        out += seccomp_args
    if steps:
        out = ["/bin/sh", "-c", " && ".join([*steps, 'exec "$@"']), "servekit-sandbox", *args, *out]
    if layout.net is not None:
        out = [*layout.net.enter, *out]
    for root in private_roots():  # /tmp writable by the job, as everyone's /tmp
        if root == "/tmp" and layout.tmp_bytes is not None:
            out += ["--size", str(layout.tmp_bytes)]
        out += [*(["--perms", "1777"] if root == "/tmp" else []), "--tmpfs", root]
    made: set[str] = set()
    roots = (*private_roots(), *(str(h) for h in layout.hidden))
    for where in layout.runtime:  # the job's Python, where it lives under a private root
        out += [*_folders_to(where, made, roots), "--ro-bind", where, where]
    for node in layout.devices:  # absent nodes are skipped (a driver without nvidia-uvm-tools)
        out += ["--dev-bind-try", node, node]
    if not layout.network and layout.net is None:
        out += ["--unshare-net"]
    if layout.net is not None and layout.net.resolv_conf is not None:
        out += ["--ro-bind", str(layout.net.resolv_conf), os.path.realpath("/etc/resolv.conf")]
    if layout.hostname is not None:
        out += ["--hostname", layout.hostname]
    if layout.hosts_file is not None:
        out += ["--ro-bind", str(layout.hosts_file), "/etc/hosts"]
    for folder in layout.hidden:
        out += [*_folders_to(str(folder), made, roots), "--tmpfs", str(folder)]
    out += ["--bind", str(layout.ml), ML]
    for name, folder in layout.channels.items():
        out += ["--ro-bind", str(folder), f"{DATA}/{name}"]
    if layout.code is not None:
        out += ["--ro-bind", str(layout.code), CODE]
    for source, target, writable in layout.mounts:
        out += [*_folders_to(target, made, roots), "--bind" if writable else "--ro-bind", str(source), target]
    if layout.bin is not None:  # `python3 script.py` (a processing entrypoint) means servekit's Python
        out += [*_folders_to(BIN, made, roots), "--ro-bind", str(layout.bin), BIN]
    where = layout.chdir or (CODE if layout.code is not None else ML)
    out += ["--chdir", where, "--"]
    if uid is not None:
        out += _nproc_limit(layout)  # kept through setpriv and exec
        out += [*_become(uid), bwrap_path, *_ROOT_INSIDE, "--die-with-parent", "--cap-drop", "ALL", *seccomp_args]
        # its own /dev: device nodes on the outer sandbox's mounts cannot be opened from a user namespace
        out += ["--bind", "/", "/", "--dev", "/dev"]
        for node in layout.devices:
            out += ["--dev-bind-try", node, node]
        out += ["--chdir", where, "--"]
    return [*out, *argv]


def _nproc_limit(layout: Layout) -> list[str]:
    """The prefix that sets RLIMIT_NPROC to the layout's process limit where no cgroup holds one."""
    prlimit = shutil.which("prlimit")
    if layout.cgroup is not None or layout.nproc is None or prlimit is None:
        return []
    return [prlimit, f"--nproc={layout.nproc}:{layout.nproc}", "--"]


def _folders_to(target: str, made: set[str], roots: Sequence[str]) -> list[str]:
    """``--dir`` for the folders above ``target`` on a tmpfs the sandbox mounts (``roots``: the private ones, the
    hidden home), open to all (bubblewrap would make them ``0700``, and a job that is not root outside could not
    pass them), each once; none inside ``/opt/ml`` (the job's own folder: :func:`hand_over` makes its mount
    points)."""
    out: list[str] = []
    parent = os.path.dirname(target.rstrip("/"))
    chain = []
    while parent not in ("/", "") and not _within(parent, ML):
        if parent in roots:
            break
        chain.append(parent)
        parent = os.path.dirname(parent)
    else:
        return out
    for folder in reversed(chain):
        if folder not in made:
            made.add(folder)
            out += ["--perms", "0755", "--dir", folder]
    return out


def _become(uid: int) -> list[str]:
    found = shutil.which("setpriv")
    if found is None:
        raise SandboxUnavailable(SETPRIV_HINT)
    return [found, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]


def hand_over(layout: Layout, uid: int | None) -> None:
    """Make ``layout``'s folders usable by a job that is ``uid`` outside (:func:`job_uid`), just before it starts:
    the writable ones (``/opt/ml``, writable mounts) become its own, the read-only ones (channels, code, inputs)
    readable by all. In a writable folder a file linked from elsewhere (a checkpoint restored from S3 is a link to
    the stored object) is first replaced by a copy, so the job never writes into another file in place (with
    ``uid`` None too)."""
    points = [*(f"{DATA}/{name}" for name in layout.channels), *([CODE] if layout.code else [])]
    for target in [*points, *(target for _, target, _ in layout.mounts)]:
        if _within(target, ML) and target != ML:  # made here, the job's, not by bubblewrap as root
            (layout.ml / os.path.relpath(target, ML)).mkdir(parents=True, exist_ok=True)
    writable = [layout.ml, *(source for source, _, rw in layout.mounts if rw)]
    readable = [*layout.channels.values(), *(p for p in (layout.code, layout.bin) if p is not None)]
    readable += [source for source, _, rw in layout.mounts if not rw]
    for folder in writable:
        for path in _tree(folder):
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                copy = path.with_name(f".{path.name}.copy")
                shutil.copy2(path, copy)
                os.replace(copy, path)
            if uid is not None:
                os.lchown(path, uid, uid)
    if uid is None:
        return
    for folder in readable:
        for path in _tree(folder):
            st = os.lstat(path)
            bits = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(st.st_mode) or st.st_mode & stat.S_IXUSR else 0)
            if not stat.S_ISLNK(st.st_mode) and st.st_mode & bits != bits:
                os.chmod(path, stat.S_IMODE(st.st_mode) | bits)


def _tree(folder: Path) -> Iterable[Path]:
    """``folder`` and everything under it, links not followed."""
    if not os.path.lexists(folder):
        return
    yield folder
    for parent, dirs, files in os.walk(folder):
        for name in (*dirs, *files):
            yield Path(parent) / name
