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


def rss_bytes(pid: int) -> int | None:
    """Resident memory of a process and its children (a serve process may run worker processes)."""
    try:
        total = 0
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) * 1024
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                children = (task / "children").read_text().split()
            except (FileNotFoundError, ProcessLookupError):  # a thread that ended meanwhile; the sample stands
                continue
            for child in children:
                total += rss_bytes(int(child)) or 0
        return total
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
