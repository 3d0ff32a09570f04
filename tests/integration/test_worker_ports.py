"""The ports of ``serve --workers N`` (launch/serve.py): the supervisor holds each port without listening, every
worker listens on it with SO_REUSEPORT, and the kernel spreads new connections over the workers that listen."""

from __future__ import annotations

import select
import socket

import pytest

from servekit.errors import ConfigError
from servekit.launch.serve import reserve, reuse_port_socket


def test_connections_are_spread_over_the_listeners_and_never_reach_the_holder() -> None:
    held = reserve("127.0.0.1", 0)
    port = held.getsockname()[1]
    assert port != 0
    workers = [reuse_port_socket("127.0.0.1", port) for _ in range(2)]
    clients: list[socket.socket] = []
    try:
        for w in workers:
            w.listen(64)
        clients = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(32)]
        taken = [0, 0]
        while sum(taken) < 32:
            ready, _, _ = select.select(workers, [], [], 5)
            assert ready, f"only {sum(taken)} of 32 connections reached a listener"
            for w in ready:
                conn, _ = w.accept()
                conn.close()
                taken[workers.index(w)] += 1
        assert min(taken) >= 1, taken  # both listeners get a share (the odds of 32 hashed to one: 2^-31)
    finally:
        for s in (*clients, *workers, held):
            s.close()


def test_a_port_another_server_listens_on_is_refused_even_with_reuse_port() -> None:
    """Another servekit's workers listen with SO_REUSEPORT too; the hold must not join them silently."""
    other = reuse_port_socket("127.0.0.1", 0)
    other.listen(8)
    try:
        with pytest.raises(ConfigError, match="another process listens there"):
            reserve("127.0.0.1", other.getsockname()[1])
    finally:
        other.close()
