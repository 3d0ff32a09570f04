"""Whether a process recorded in the state (a job's or a run's owner) still runs, and stopping the child processes a
plane started."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
from collections.abc import Iterable
from pathlib import Path


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity: a container's or ``taskset``'s share), else the machine's."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def cpu_share(processes: int, cpus: int | None = None) -> int:
    """One of ``processes`` processes' share of ``cpus`` (default: :func:`usable_cpus`) for its compute threads,
    at least 1: each taking one per CPU would run ``processes`` times as many threads as there are CPUs."""
    return max(1, (cpus or usable_cpus()) // max(1, processes))


def pid_alive(pid: int | None) -> bool:
    """Whether process ``pid`` exists on this host (one owned by another user counts: it exists)."""
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_alive(pid: int | None, host: str | None) -> bool:
    """Whether the process that owns a record still runs; one recorded on another host is assumed to (this host
    cannot look)."""
    if host and host != socket.gethostname():
        return True
    return pid_alive(pid)


async def stop_children(children: Iterable[asyncio.subprocess.Process], grace_s: float, *, group: bool) -> None:
    """Ask the children still running to stop (SIGINT: each ends its work as after Ctrl-C, to ``group`` = its whole
    process group, else the child alone), wait ``grace_s`` seconds for each, then kill the process group of any
    that is still there."""
    live = [p for p in children if p.returncode is None]
    for proc in live:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if group:
                os.killpg(proc.pid, signal.SIGINT)
            else:
                os.kill(proc.pid, signal.SIGINT)
    for proc in live:
        try:
            await asyncio.wait_for(proc.wait(), grace_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)


def _vm_rss(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return sum(int(line.split()[1]) * 1024 for line in text.splitlines() if line.startswith("VmRSS:"))


def rss_bytes(pid: int) -> int | None:
    """Resident memory of a process and its descendants (a serve process may run worker processes); None when the
    process is gone."""
    own = _vm_rss(pid)
    if own is None:
        return None
    return own + sum(_vm_rss(child) or 0 for child in descendants(pid))


def sandbox_memory(pid: int) -> int | None:
    """What a sandbox (bubblewrap, ``pid``) holds in memory: its processes' resident memory and what its private
    ``/tmp`` stores (a tmpfs: its pages are memory too); None when it is gone."""
    rss = rss_bytes(pid)
    return None if rss is None else rss + _private_tmp_bytes(pid)


def _private_tmp_bytes(pid: int) -> int:
    """Bytes in the ``/tmp`` a process under ``pid`` sees, when that is a tmpfs other than this process's /tmp."""
    try:
        ours = os.stat("/tmp").st_dev
    except OSError:
        ours = -1
    for child in descendants(pid)[:4]:  # the sandbox's first processes: all see the same /tmp
        where = f"/proc/{child}/root/tmp"
        try:
            if os.stat(where).st_dev == ours:
                continue
            st = os.statvfs(where)
        except OSError:
            continue
        return (st.f_blocks - st.f_bfree) * st.f_frsize
    return 0


def out_of_memory(used: int, limit: int, instance_type: str) -> str:
    """A job host's FailureReason when its processes outgrew its instance type (here or on a Ray node)."""
    return (
        f"OutOfMemoryError: out of memory: the job's processes held {used / 2**30:.2f} GiB (resident memory and its "
        f"/tmp), over the {limit / 2**30:.2f} GiB of its instance type {instance_type}"
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A port no one listens on now (on ``host``, the loopback by default)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def descendants(pid: int) -> list[int]:
    """The processes ``pid`` started, and theirs (each once; empty when it is gone)."""
    out: list[int] = []
    todo = [pid]
    seen = {pid}
    while todo:
        p = todo.pop()
        try:
            tasks = list(Path(f"/proc/{p}/task").iterdir())
        except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError):
            continue
        for task in tasks:
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue
            for child in children:
                if child not in seen:
                    seen.add(child)
                    out.append(child)
                    todo.append(child)
    return out


TERM_AGAIN_S = 0.5  # during a stop's grace, how often SIGTERM goes to what started in the sandbox since


def terminate_sandbox(pid: int, signalled: set[int]) -> None:
    """SIGTERM to the processes inside a sandbox (``pid``) not signalled yet, adding them to ``signalled``; called
    again during the grace, it reaches what started since (a stop that lands while the sandbox is still starting its
    script would otherwise reach no one, and the job would run out its whole grace). bubblewrap's own processes are
    left out: an inner sandbox's bwrap (a plane run as root) would die of it and take the job down with SIGKILL
    before it could save anything. With nothing inside yet, the sandbox itself ends (there is nothing there to
    save)."""
    inside = [p for p in descendants(pid) if _command_name(p) != "bwrap"]
    if not inside:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
        return
    for p in inside:
        if p not in signalled:
            signalled.add(p)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, signal.SIGTERM)


def _command_name(pid: int) -> str:
    """A process's name (``comm``); "" when it is gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def signal_sandbox(pid: int, sig: int) -> None:
    """``sig`` to a sandbox (bubblewrap, started in a session of its own): its whole group and every process inside
    (SIGKILL, when a stop's grace is over or memory runs out). A stop's SIGTERM goes through
    :func:`terminate_sandbox` instead, to the processes inside only."""
    targets = descendants(pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
    for p in targets:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, sig)
