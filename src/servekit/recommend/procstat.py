"""CPU time of a process and its descendants, from ``/proc`` (Linux). The instance under test is a ``servekit serve``
process that may run children (worker processes, the large-body decoder), so its cost per request is the whole
tree's; threads are counted through the process's own ``utime``/``stime``, which include all its threads."""

from __future__ import annotations

import os
from pathlib import Path


def clock_ticks() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 100


def parse_stat_cpu_ticks(text: str) -> int:
    """``utime + stime`` (clock ticks) of one ``/proc/<pid>/stat`` line. The command name (field 2) is in
    parentheses and may hold spaces or parentheses itself, so the fields are counted after its last ``)``."""
    rest = text[text.rindex(")") + 2 :].split()
    # rest[0] is field 3 (state); utime and stime are fields 14 and 15
    return int(rest[11]) + int(rest[12])


def _children(pid: int, proc: Path) -> list[int]:
    found: list[int] = []
    try:
        tasks = list((proc / str(pid) / "task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:  # a thread that ended meanwhile
            continue
    return found


def tree_cpu_seconds(pid: int, proc: Path = Path("/proc"), ticks: int | None = None) -> float | None:
    """CPU seconds (user + system) used so far by ``pid`` and its live descendants; None when ``pid`` is gone.
    A descendant that ended between two readings takes its time with it: read while the tree is stable."""
    hz = ticks or clock_ticks()
    try:
        total = parse_stat_cpu_ticks((proc / str(pid) / "stat").read_text())
    except (OSError, ValueError, IndexError):
        return None
    for child in _children(pid, proc):
        total += round((tree_cpu_seconds(child, proc, hz) or 0.0) * hz)
    return total / hz
