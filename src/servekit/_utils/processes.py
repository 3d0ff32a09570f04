"""Whether a process recorded in the state (a job's or a run's owner) still runs."""

from __future__ import annotations

import os
import socket


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
