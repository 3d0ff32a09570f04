"""CtrlC (a real fork, a real SIGINT to this process): SIGINT counted and woken on a descriptor, raised only inside
``raising()``, never inside an at-fork callback."""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection
import os
import select
import signal
import sys

import pytest

from servekit._utils.ctrl_c import CtrlC


def _readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def test_sigint_is_counted_and_wakes_the_descriptor_without_raising() -> None:
    with CtrlC() as ctrl_c:
        assert not _readable(ctrl_c.fd)
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        assert ctrl_c.count == 2
        assert _readable(ctrl_c.fd)
        assert ctrl_c.fd in multiprocessing.connection.wait([ctrl_c.fd], timeout=0)
        ctrl_c.drain()
        assert not _readable(ctrl_c.fd)


def test_raising_region_raises_keyboard_interrupt_and_at_once_after_an_earlier_sigint() -> None:
    with CtrlC() as ctrl_c:
        with pytest.raises(KeyboardInterrupt), ctrl_c.raising():
            os.kill(os.getpid(), signal.SIGINT)
        assert ctrl_c.count == 1
        with pytest.raises(KeyboardInterrupt), ctrl_c.raising():
            pass
        os.kill(os.getpid(), signal.SIGINT)  # outside the region again: counted only
        assert ctrl_c.count == 2


def test_the_previous_handler_comes_back() -> None:
    before = signal.getsignal(signal.SIGINT)
    with CtrlC():
        assert signal.getsignal(signal.SIGINT) is not before
    assert signal.getsignal(signal.SIGINT) is before


@pytest.mark.skipif(sys.platform != "linux", reason="fork")
def test_sigint_during_a_forks_callbacks_raises_nothing_there(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CI hang: Python drops a KeyboardInterrupt raised in an at-fork callback (as "Exception ignored"), and
    when that callback was logging's ``_releaseLock`` its lock stays held. Under CtrlC nothing is raised there."""
    unraisable: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    armed = {"on": False}

    def interrupt_in_parent() -> None:
        if armed["on"]:
            armed["on"] = False
            os.kill(os.getpid(), signal.SIGINT)

    os.register_at_fork(after_in_parent=interrupt_in_parent)
    with CtrlC() as ctrl_c:
        armed["on"] = True
        proc = mp.get_context("fork").Process(target=int)
        proc.start()
        proc.join()
        assert ctrl_c.count == 1
    assert unraisable == []
