"""CPU time of a process and its descendants, from ``/proc`` (Linux). The instance under test is a ``servekit serve``
process that may run children (worker processes, the large-body decoder), so its cost per request is the whole
tree's. The reading itself is the utilization sampler's (:class:`servekit.services.hosting.utilization.Proc`): one /proc
walker for both."""

from __future__ import annotations

from pathlib import Path

from servekit.services.hosting.utilization import Proc, stat_ticks


def parse_stat_cpu_ticks(text: str) -> int:
    """CPU clock ticks of one ``/proc/<pid>/stat`` line (its own and its reaped children's)."""
    ticks = stat_ticks(text)
    if ticks is None:
        raise ValueError(f"not a /proc/<pid>/stat line: {text[:80]!r}")
    return ticks


def tree_cpu_seconds(pid: int, proc: Path = Path("/proc"), ticks: int | None = None) -> float | None:
    """CPU seconds used so far by ``pid`` and its live descendants; None when ``pid`` is gone."""
    return (Proc(proc, ticks) if ticks else Proc(proc)).cpu_seconds(pid)
