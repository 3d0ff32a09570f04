"""A burst of new connections is taken in one turn of uvloop's loop (launch/accept.py).

One turn is run by scheduling ``loop.stop`` and running the loop: uvloop polls once before it stops. What the
turn accepted is read back from the kernel: the connections still waiting in the listening socket's queue are
the ones it did not take.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import resource
import socket
from collections.abc import Iterator

import pytest

from servekit.launch.accept import ACCEPTS_PER_TURN, FD_SHARE, accepts_per_turn, fanned_out
from servekit.launch.serve import bind

BURST = 40


class _Quiet(asyncio.Protocol):
    """Counts the connections that ended (the clients close them) so the loop can be closed after the last."""

    lost = 0
    all_lost: asyncio.Event

    def connection_lost(self, exc: Exception | None) -> None:
        type(self).lost += 1
        if type(self).lost == _Quiet.expected:
            _Quiet.all_lost.set()

    expected = 0


def _still_queued(listener: socket.socket) -> int:
    listener.setblocking(False)
    n = 0
    while True:
        try:
            conn, _ = listener.accept()
        except BlockingIOError:
            return n
        conn.close()
        n += 1


@contextlib.contextmanager
def _burst(port: int) -> Iterator[list[socket.socket]]:
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(BURST)]
    try:
        yield clients
    finally:
        for c in clients:
            c.close()


def _one_turn(sockets: list[socket.socket]) -> int:
    """Connections left in the accept queue after one turn of a uvloop loop serving ``sockets``."""
    uvloop = pytest.importorskip("uvloop")
    loop = uvloop.new_event_loop()
    listener = sockets[0]
    _Quiet.lost = 0
    _Quiet.all_lost = asyncio.Event()
    try:
        servers = [loop.run_until_complete(loop.create_server(_Quiet, sock=s)) for s in sockets]
        with _burst(listener.getsockname()[1]):
            loop.call_soon(loop.stop)
            loop.run_forever()
            left = _still_queued(listener)
            _Quiet.expected = BURST - left
        for server in servers:
            server.close()
        # The clients have closed: every connection the loop took ends before the loop is closed.
        loop.run_until_complete(asyncio.wait_for(_Quiet.all_lost.wait(), 30))
    finally:
        loop.close()
    return left


@contextlib.contextmanager
def _open_files(wanted: int) -> Iterator[None]:
    """The process's soft open-file limit raised to ``wanted`` where the hard limit allows (a machine whose
    default is 1024 gets 4 copies, fewer than the burst), put back after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    raised = soft != resource.RLIM_INFINITY and soft < wanted and (hard == resource.RLIM_INFINITY or hard >= wanted)
    if raised:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    try:
        yield
    finally:
        if raised:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_uvloop_takes_the_whole_burst_in_one_turn_from_the_fanned_out_socket() -> None:
    listener = bind("127.0.0.1", 0)
    with _open_files(ACCEPTS_PER_TURN * FD_SHARE):
        sockets = fanned_out([listener], "uvloop")
        assert len(sockets) == accepts_per_turn(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    if len(sockets) < BURST:
        for sock in sockets:
            sock.close()
        pytest.skip(f"the hard open-file limit allows only {len(sockets)} copies, fewer than the burst of {BURST}")
    assert _one_turn(sockets) == 0


def test_one_registration_takes_one_connection_a_turn() -> None:
    """Why the copies exist: libuv accepts once each time it polls a listening socket readable (the run polls
    once or twice before it stops). Should a libuv release drain the queue itself, this fails and the copies can
    go."""
    listener = bind("127.0.0.1", 0)
    assert _one_turn([listener]) >= BURST - 2


def test_asyncio_gets_each_socket_once() -> None:
    listener = bind("127.0.0.1", 0)
    try:
        assert fanned_out([listener], "asyncio") == [listener]
    finally:
        listener.close()


@pytest.mark.parametrize(
    ("soft", "copies"),
    [(1024, 1024 // FD_SHARE), (20000, ACCEPTS_PER_TURN), (100, 1), (resource.RLIM_INFINITY, ACCEPTS_PER_TURN)],
)
def test_the_copies_stay_a_small_share_of_the_descriptor_budget(soft: int, copies: int) -> None:
    assert accepts_per_turn(soft) == copies


def _nonblocking(sock: socket.socket) -> bool:
    return bool(fcntl.fcntl(sock.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK)


def test_the_shared_socket_stays_non_blocking_whoever_duplicates_it() -> None:
    """O_NONBLOCK belongs to the socket every worker holds, and ``socket.dup()`` re-applies the object's timeout
    to it: multiprocessing dups the socket when the supervisor spawns a replacement worker. Were it turned blocking,
    a serving worker's copies would wait inside accept() once the queue is empty (its loop stalled 10 s when a
    worker was killed, tests/e2e/test_workers.py)."""
    sock = bind("127.0.0.1", 0)
    try:
        assert _nonblocking(sock)
        spare = sock.dup()  # as multiprocessing's reduction does for a spawned worker
        spare.close()
        assert _nonblocking(sock)
        sock.setblocking(True)  # a caller's socket object in blocking mode: the fan-out makes it non-blocking
        copies = fanned_out([sock], "uvloop")
        assert _nonblocking(sock)
        for copy in copies[1:]:
            copy.close()
    finally:
        sock.close()
