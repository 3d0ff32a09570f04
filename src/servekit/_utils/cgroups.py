"""A cgroup per job host that caps how many processes it may have (``pids.max``), where this machine lets servekit
make one: cgroup v1's pids hierarchy (writable by root), or cgroup v2 where the pids controller is enabled for the
children of servekit's own group. Elsewhere :func:`pids_group` answers None and the host runs without a process limit
(its memory envelope still counts every process)."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

STALE_S = 60.0  # a servekit-* group this old with no process left is a finished job's, removed at the next job


def _own_groups() -> dict[str, str]:
    """This process's group per hierarchy: ``{"pids": "/x"}`` for v1, ``{"": "/x"}`` for the v2 one."""
    groups: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                groups[controller] = path
    return groups


def _mounts() -> list[tuple[Path, str, set[str]]]:
    """(mount point, fstype, super options) of each cgroup filesystem."""
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            fields, rest = left.split(), right.split()
            if len(fields) > 4 and len(rest) > 2 and rest[0] in ("cgroup", "cgroup2"):
                found.append((Path(fields[4]), rest[0], set(rest[2].split(","))))
    return found


def pids_base() -> Path | None:
    """The group under which a job host's own pids group can be made (servekit's own group), or None."""
    own = _own_groups()
    for mount, fstype, options in _mounts():
        if fstype == "cgroup" and "pids" in options and "pids" in own:
            base = mount / own["pids"].lstrip("/")
        elif fstype == "cgroup2" and "" in own:
            base = mount / own[""].lstrip("/")
            try:
                if "pids" not in (base / "cgroup.subtree_control").read_text().split():
                    continue
            except OSError:
                continue
        else:
            continue
        if os.access(base, os.W_OK):
            return base
    return None


def pids_group(name: str, limit: int) -> Path | None:
    """A new group ``name`` of at most ``limit`` processes (what a process writes its pid into ``cgroup.procs`` of
    joins it, and its children with it), or None where this machine lets servekit make none."""
    base = pids_base()
    if base is None:
        return None
    for old in base.glob("servekit-*"):  # groups a job left while its last processes were still being reaped
        with contextlib.suppress(OSError):
            if time.time() - old.stat().st_mtime > STALE_S:  # not one another plane has just made for its job
                remove(old)
    path = base / name
    try:
        path.mkdir(exist_ok=True)
        (path / "pids.max").write_text(f"{limit}\n")
    except OSError:
        with contextlib.suppress(OSError):
            path.rmdir()
        return None
    return path


def remove(path: Path) -> None:
    """Remove a group whose processes have all ended (one still in use, or whose last processes the kernel is still
    reaping, stays: the next :func:`pids_group` removes it; nothing is raised)."""
    with contextlib.suppress(OSError):
        path.rmdir()
