"""exit_with_parent: only a named parent is watched, its name leaves the environment (workers do not inherit it),
and once the parent is gone the process is asked to stop, then killed. The real thing (a plane killed with SIGKILL,
its instances gone within 10 s) is tests/e2e/test_orphan_instances.py."""

from __future__ import annotations

import os
import signal

from servekit._utils.parent_watch import PARENT_PID_ENV, exit_with_parent


def test_without_a_parent_named_nothing_is_watched() -> None:
    assert exit_with_parent({}) is None
    env = {PARENT_PID_ENV: "not-a-pid"}
    assert exit_with_parent(env) is None
    assert env == {}


def test_a_parent_that_is_gone_stops_the_process_term_then_kill() -> None:
    sent: list[int] = []
    gone = os.getpid()  # never this process's parent: as after the parent died and the orphan was adopted
    env = {PARENT_PID_ENV: str(gone), "OTHER": "kept"}
    thread = exit_with_parent(env, poll_s=0.0, grace_s=0.0, stop=sent.append)
    assert thread is not None and thread.daemon
    thread.join(10)
    assert not thread.is_alive()
    assert sent == [signal.SIGTERM, signal.SIGKILL]
    assert env == {"OTHER": "kept"}  # what this process starts does not watch a pid that is not its parent
