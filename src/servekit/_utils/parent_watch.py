"""A child that ends with the process that started it: ``servekit up`` names itself in ``SERVEKIT_PARENT_PID`` to
the ``servekit serve`` instances it starts, and each stops once that process is gone.

A ``kill -9`` of the plane gives it no chance to stop its instances; left running, they hold memory, ports and
GPUs, reparented to PID 1, until a plane on the same home reaps them. Linux's ``PR_SET_PDEATHSIG`` would not do:
it fires when the *thread* that forked the child exits, not the process, and asyncio may fork from any thread. A
pipe whose end the plane holds would be kept open by any other child that inherits it by a fork. The parent pid
is what cannot lie: once the plane has died, ``getppid()`` names whoever adopted the orphan instead."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, MutableMapping

PARENT_PID_ENV = "SERVEKIT_PARENT_PID"
POLL_S = 1.0  # how soon after its parent's death an instance notices
GRACE_S = 5.0  # SIGTERM first (capture buffers flushed, connections closed), then SIGKILL: gone within ~6 s

log = logging.getLogger(__name__)


def exit_with_parent(
    environ: MutableMapping[str, str] = os.environ,
    poll_s: float = POLL_S,
    grace_s: float = GRACE_S,
    stop: Callable[[int], None] | None = None,
) -> threading.Thread | None:
    """When ``environ`` names a parent pid, watch it from a daemon thread and stop this process (and its process
    group, which a backend's instance leads) once the parent is gone. The variable is removed from ``environ``, so
    processes this one starts (``--workers``) do not watch a pid that is not their parent. ``stop`` sends a signal
    (default: to the group). Returns the watching thread, or None when there is no parent to watch."""
    raw = environ.pop(PARENT_PID_ENV, None)
    if raw is None:
        return None
    try:
        parent = int(raw)
    except ValueError:
        log.warning("ignoring %s=%r: not a process id", PARENT_PID_ENV, raw)
        return None
    thread = threading.Thread(
        target=_watch, args=(parent, poll_s, grace_s, stop or _signal_group), name="servekit-parent-watch", daemon=True
    )
    thread.start()
    return thread


def _watch(parent: int, poll_s: float, grace_s: float, stop: Callable[[int], None]) -> None:
    wake = threading.Event()  # never set: a timed wait that is not a bare sleep
    while os.getppid() == parent:
        wake.wait(poll_s)
    log.warning("the process that started this instance (pid %d) has ended: stopping", parent)
    stop(signal.SIGTERM)
    wake.wait(grace_s)
    log.warning("still running %gs after SIGTERM: killing", grace_s)
    stop(signal.SIGKILL)


def _signal_group(sig: int) -> None:
    """``sig`` to this process's group when it leads one (a backend starts each instance in a session of its own, so
    the group is the instance and its workers), else to this process alone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgrp() == os.getpid():
            os.killpg(0, sig)
        else:
            os.kill(os.getpid(), sig)
