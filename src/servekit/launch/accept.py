"""Taking a burst of new connections in one turn of uvloop's event loop (``serve``, ``up``).

libuv, under uvloop, accepts one connection each time its loop finds a listening socket readable: once a turn.
Under overload a turn takes 100 ms or more (hundreds of connections have bytes to read and answers to write), so
a burst of new connections waits in the kernel's accept queue for seconds while the clients believe themselves
connected and their requests time out: 800 clients arriving at an overloaded ``servekit serve`` left ~300 of
them queued for 3 s (``ss``'s Recv-Q on the listening socket) and wrk counted their first requests as socket
timeouts (benchmarks/OVERLOAD_RESULTS.md). The loop is therefore handed each listening socket under several
descriptors (``dup``): each is found readable in the same turn and takes one connection, and those that find the
queue empty get EAGAIN inside libuv and cost no Python call. asyncio's own loop already takes up to its backlog
per event, so it gets each socket once.
"""

from __future__ import annotations

import resource
import socket

ACCEPTS_PER_TURN = 64
# Descriptors are the process's connection budget (launch/connections.py's default cap); the copies take at most
# one in this many of them.
FD_SHARE = 256


def accepts_per_turn(soft_limit: int) -> int:
    """How many descriptors a listening socket gets, for a process whose open-file limit is ``soft_limit``."""
    if soft_limit == resource.RLIM_INFINITY or soft_limit <= 0:
        return ACCEPTS_PER_TURN
    return max(1, min(ACCEPTS_PER_TURN, soft_limit // FD_SHARE))


def fanned_out(sockets: list[socket.socket], loop: str) -> list[socket.socket]:
    """``sockets`` as the server should be handed them on event loop ``loop`` ("uvloop" or "asyncio"): under
    uvloop each one followed by its duplicates (closed with it at shutdown: uvicorn closes every socket it is
    given)."""
    if loop != "uvloop":
        return sockets
    copies = accepts_per_turn(resource.getrlimit(resource.RLIMIT_NOFILE)[0]) - 1
    for sock in sockets:
        # ``dup()`` applies the object's timeout to the shared socket: a blocking-mode object would make every copy,
        # in every process, block in accept() once the queue is empty, stalling the loop.
        sock.setblocking(False)
    return [fd for sock in sockets for fd in (sock, *(sock.dup() for _ in range(copies)))]
