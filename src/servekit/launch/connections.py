"""Connection hygiene for ``serve``: read timeouts and a cap on open connections, in uvicorn's HTTP protocols.

uvicorn closes a kept-alive connection that sends nothing after a response (``timeout_keep_alive``), but a
connection that never sends a first byte, dribbles its request head a byte at a time, or stalls below its
Content-Length stays open forever; enough of them exhaust the process's file descriptors. Each connection here
gets a :class:`_Guard` that tracks where it is in its request and keeps one timer:

- ``idle``: open, no byte yet (``idle_timeout_seconds``), closed silently;
- ``head``: the first byte of a request has arrived and the head must be complete within
  ``header_timeout_seconds`` of it, however it is dribbled; answered 408 and closed;
- ``body``: the head is complete and the body must be complete within ``body_timeout_seconds``; answered 408
  (unless a response has started) and closed. Time during which the server itself stopped reading (its flow
  control, the application not consuming the body yet) is not held against the client;
- ``busy`` (the request is being answered) and ``wait`` (between requests: uvicorn's keep-alive timer) have no
  timer of ours.

Over ``max_connections`` open connections, a new one is answered 503 with ``Retry-After`` and closed at once.

After a request the app refused as overload (``SHED_KEY`` in its scope: the overload gate, protocols/app.py), the
connection is not read for a while (the last quarter of its ``Retry-After``, spread: :func:`_spread_hold`): a client
that sends again at once would otherwise spin, and on a loaded machine its refusals take the CPU the admitted
requests need. A request found already waiting when reading resumes was sent before Retry-After had passed; it is
marked (``EARLY_KEY``) and the app refuses it at once instead of answering it up to a second late (the connection
is not held again: the client's next request is decided afresh).
Both the timeouts and the refusals are logged, rate limited. The same guard wraps uvicorn's h11 protocol (the
plain install) and its httptools one (``[fast]``), whichever event loop runs them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import random
import resource
import socket
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, ClassVar, Literal, Protocol, cast
from urllib.parse import unquote

import h11
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.h11_impl import H11Protocol

from servekit.config.models import ConnectionLimits
from servekit.serving.protocols.http import ADMITTED_KEY, EARLY_KEY, RETRY_AFTER_SECONDS, SHED_BODY, SHED_KEY, Backlog

log = logging.getLogger("servekit.connections")

Phase = Literal["idle", "head", "body", "busy", "wait", "closing"]
HttpImpl = Literal["auto", "h11", "httptools"]
LOG_INTERVAL_S = 10.0
# After an error answer the write side is shut and what the client still sends is read and dropped for at most
# this long before the connection closes: closing with unread input would send a reset, which can destroy the
# answer before the client reads it.
LINGER_S = 1.0
HOLD_S = float(RETRY_AFTER_SECONDS)  # a connection whose request was refused as overload is not read at most this long


def _raw_response(status: bytes, message: str, extra: bytes = b"") -> bytes:
    body = b'{"error":"' + message.encode() + b'"}'
    return (
        b"HTTP/1.1 "
        + status
        + b"\r\ncontent-type: application/json\r\ncontent-length: %d\r\n" % len(body)
        + extra
        + b"connection: close\r\n\r\n"
        + body
    )


_408 = _raw_response(b"408 Request Timeout", "the request was not received in time")
_503 = _raw_response(b"503 Service Unavailable", "too many open connections", b"retry-after: 1\r\n")
# An inference request refused as overload in the parser's callback (keeps the connection; the app's own body).
_OVERLOADED = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
    b"retry-after: " + RETRY_AFTER_SECONDS.encode() + b"\r\n\r\n%s"
) % (len(SHED_BODY), SHED_BODY)


def default_max_connections() -> int:
    """Open connections a process may hold: its file limit less a reserve for models, polling and logs."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        soft = 65536
    return max(16, soft - max(64, soft // 4))


def resolve(limits: ConnectionLimits) -> ConnectionLimits:
    """``limits`` with ``max_connections`` 0 replaced by :func:`default_max_connections`."""
    if limits.max_connections:
        return limits
    return dataclasses.replace(limits, max_connections=default_max_connections())


class _Every:
    """Counts events and logs them at most once per interval (the first at once), with the count since the
    previous line."""

    def __init__(self, level: int, interval: float = LOG_INTERVAL_S) -> None:
        self._level = level
        self._interval = interval
        self._next = 0.0
        self._since = time.monotonic()
        self.pending: Counter[str] = Counter()

    def note(self, kind: str, describe: Any) -> None:
        """Count one ``kind``; when a line is due, log ``describe(pending, seconds)``."""
        self.pending[kind] += 1
        now = time.monotonic()
        if now < self._next:
            return
        log.log(self._level, "%s", describe(self.pending, now - self._since))
        self.pending = Counter()
        self._next = now + self._interval
        self._since = now


def _spread_hold(rng: random.Random) -> Callable[[], float]:
    """Holds spread over the last quarter of Retry-After. Refusals come in bursts (a jump in load, a limit that
    shrinks), and equal holds release each burst's connections in the same instant a second later, so the burst
    comes back every second (measured: the admitted requests' waits spiked to 3x each time); spread, they come back
    a few at a time. Never longer than Retry-After, so a client that waits it out is read at once. Shorter holds
    mean more refusals from clients that do not wait: 0.75-1.0 gave a lower c=400 p99 than equal 1-s holds and
    than 0.5-1.0 (three alternated runs each, benchmarks/OVERLOAD_RESULTS.md)."""
    return lambda: HOLD_S * rng.uniform(0.75, 1.0)


class GuardStats:
    """Per process (all connections of one server): counts and rate-limited log lines."""

    def __init__(
        self,
        limits: ConnectionLimits,
        interval: float = LOG_INTERVAL_S,
        backlog: Backlog | None = None,
        hold_s: Callable[[], float] | None = None,
    ) -> None:
        """``hold_s``: how long to hold the next connection refused as overload (default: :func:`_spread_hold`)."""
        self.limits = limits
        # Requests received whole and not yet answered (the "busy" phase), for the app (protocols/http.py).
        self.backlog = backlog or Backlog()
        self.refused = _Every(logging.WARNING, interval)
        self.timed_out = _Every(logging.INFO, interval)
        self.totals: Counter[str] = Counter()
        # The app's overload decision as a request's head is parsed (FastPath.refuse_now), where it has one.
        self.refuse: Callable[[bytes, str, bool], str | None] | None = None
        self.hold_s = hold_s or _spread_hold(random.Random())

    def note_refused(self, open_connections: int) -> None:
        self.totals["refused"] += 1
        cap = self.limits.max_connections

        def describe(pending: Counter[str], seconds: float) -> str:
            return (
                f"connection cap reached: refused {pending['refused']} new connection(s) with 503 in the last "
                f"{seconds:.0f}s ({open_connections} open, --max_connections {cap})"
            )

        self.refused.note("refused", describe)

    def note_timeout(self, phase: str) -> None:
        self.totals[phase] += 1
        lim = self.limits

        def describe(pending: Counter[str], seconds: float) -> str:
            parts = [
                f"{pending[name]} {what} (--{flag} {value:g})"
                for name, what, flag, value in (
                    ("idle", "sent nothing", "idle_timeout_seconds", lim.idle_timeout_seconds),
                    ("head", "did not finish a request head", "header_timeout_seconds", lim.header_timeout_seconds),
                    ("body", "did not finish a request body", "body_timeout_seconds", lim.body_timeout_seconds),
                )
                if pending[name]
            ]
            return f"closed slow connections in the last {seconds:.0f}s: " + ", ".join(parts)

        self.timed_out.note(phase, describe)


class _Guarded(Protocol):
    """What a guard needs of its uvicorn protocol."""

    transport: asyncio.Transport
    flow: FlowControl
    loop: asyncio.AbstractEventLoop
    connections: set[Any]
    cycle: Any


def _waiting_input(transport: asyncio.Transport) -> bool:
    """Whether the client has sent bytes this process has not read yet (a peek on a duplicate of the socket:
    uvloop's transports hand out a socket object that cannot receive)."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return False
    try:
        with socket.socket(fileno=os.dup(sock.fileno())) as dup:
            return bool(dup.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except OSError:  # nothing waiting (EAGAIN), or the connection is gone
        return False


class _Guard:
    __slots__ = ("_due", "_held", "_limits", "_proto", "_stats", "_timer", "early", "phase")

    def __init__(self, proto: _Guarded, stats: GuardStats) -> None:
        self._proto = proto
        self._limits = stats.limits
        self._stats = stats
        self.phase: Phase = "idle"
        self._timer: asyncio.TimerHandle | None = None
        # A timer is started only when the protocol is done with a batch of bytes (settle), so a request that
        # arrives whole in one read costs no timer at all.
        self._due: float | None = None
        self._held: asyncio.TimerHandle | None = None
        self.early = False  # the request read next was sent while the connection was held

    def start(self) -> bool:
        """On a new connection: False (and the connection refused) when over the cap."""
        proto = self._proto
        if len(proto.connections) > self._limits.max_connections:
            self._stats.note_refused(len(proto.connections) - 1)
            self._answer_and_close(_503)
            return False
        self._arm("idle", self._limits.idle_timeout_seconds)
        self.settle()
        return True

    def bytes_arrived(self) -> None:
        if self.phase in ("idle", "wait"):
            self._arm("head", self._limits.header_timeout_seconds)

    def head_done(self) -> None:
        if self.phase != "body":
            self._arm("body", self._limits.body_timeout_seconds)

    def body_done(self) -> None:
        if self.phase in ("idle", "head", "body"):
            self._cancel("busy")

    def response_done(self) -> None:
        if self.phase == "busy":
            self._cancel("wait")

    def stop(self) -> None:
        self._cancel("closing")
        if self._held is not None:
            self._held.cancel()
            self._held = None

    def after_response(self, cycle: Any) -> None:
        """After a response: hold the connection unread for Retry-After when it was an overload refusal."""
        if cycle is None or SHED_KEY not in cycle.scope:
            return
        proto = self._proto
        if proto.transport.is_closing() or self._held is not None:
            return
        proto.transport.pause_reading()
        self._held = proto.loop.call_later(self._stats.hold_s(), self._release)

    def _release(self) -> None:
        self._held = None
        proto = self._proto
        transport = proto.transport
        if transport.is_closing():
            return
        self.early = _waiting_input(transport)
        if not proto.flow.read_paused:  # uvicorn's own flow control may hold it too; it resumes it then
            transport.resume_reading()

    @property
    def discarding(self) -> bool:
        """True once the connection is being closed: what arrives is dropped unparsed."""
        return self.phase == "closing"

    def settle(self) -> None:
        """Start the timer of the phase the connection is left in (after the protocol handled some bytes)."""
        if self._due is not None:
            if self._due > 0:
                self._timer = self._proto.loop.call_later(self._due, self._expired)
            self._due = None

    def _arm(self, phase: Phase, seconds: float) -> None:
        self._cancel(phase)
        self._due = seconds

    def _cancel(self, phase: Phase) -> None:
        if (phase == "busy") != (self.phase == "busy"):  # every way out of "busy" passes here: answered or closed
            self._stats.backlog.pending += 1 if phase == "busy" else -1
        self.phase = phase
        self._due = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        proto = self._proto
        transport = proto.transport
        if transport.is_closing():
            return
        if self.phase == "body" and proto.flow.read_paused:  # we stopped reading, not the client: wait again
            self._timer = proto.loop.call_later(self._limits.body_timeout_seconds, self._expired)
            return
        self._stats.note_timeout(self.phase)
        # In the body phase the protocol's current cycle is this request's (in the head phase, the previous one's).
        cycle = proto.cycle if self.phase == "body" else None
        answered = cycle is not None and cycle.response_started
        if cycle is not None:
            # The application stops waiting for the rest of the body (it reads a disconnect, and whatever it
            # sends is dropped), as if the client had gone.
            cycle.disconnected = True
            cycle.message_event.set()
        if self.phase == "idle" or answered:
            self._cancel("closing")
            transport.close()
        else:
            self._answer_and_close(_408)

    def _answer_and_close(self, response: bytes) -> None:
        self._cancel("closing")
        proto = self._proto
        transport = proto.transport
        transport.write(response)
        if not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        proto.flow.resume_reading()  # drain what the client still sends (dropped), until it closes or LINGER_S
        self._timer = proto.loop.call_later(LINGER_S, transport.close)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a :class:`_Guard`; h11 has no callbacks, so its state after each batch of
    events tells where the request is."""

    guard_stats: ClassVar[GuardStats]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._guard = _Guard(self, self.guard_stats)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._guard.start()

    def connection_lost(self, exc: Exception | None) -> None:
        self._guard.stop()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._guard.discarding:
            return
        self._guard.bytes_arrived()
        super().data_received(data)
        self._guard.settle()

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self._guard.early and self.cycle is not cycle and self.cycle is not None:
            cast("dict[str, Any]", self.cycle.scope)[EARLY_KEY] = True  # its task has not run yet
            self._guard.early = False
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            self._guard.head_done()
        elif state is h11.IDLE:
            if self.conn.trailing_data[0]:  # part of the next request's head is buffered
                self._guard.bytes_arrived()
        else:
            self._guard.body_done()

    def on_response_complete(self) -> None:
        self._guard.response_done()
        super().on_response_complete()
        self._guard.after_response(self.cycle)
        self._guard.settle()


async def _answered(scope: Any, receive: Any, send: Any) -> None:
    """The app of a request the connection has answered itself (refused as overload)."""


def _httptools_class() -> type[asyncio.Protocol]:
    import httptools
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class GuardedHttpToolsProtocol(HttpToolsProtocol):
        """uvicorn's httptools protocol with a :class:`_Guard`, moved on by the parser's callbacks."""

        guard_stats: ClassVar[GuardStats]

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._guard = _Guard(self, self.guard_stats)

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._guard.start()

        def connection_lost(self, exc: Exception | None) -> None:
            self._guard.stop()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._guard.discarding:
                return
            self._guard.bytes_arrived()
            super().data_received(data)
            self._guard.settle()

        def on_headers_complete(self) -> None:
            guard = self._guard
            refused = self._refuse_now()
            guard.early = False
            if refused is None or refused == "in":
                if refused == "in":  # its wait for the loop counts as waiting
                    cast("dict[str, Any]", self.scope)[ADMITTED_KEY] = time.perf_counter()
                super().on_headers_complete()
                guard.head_done()
                return
            # Answered here, in the parser's callback: no ASGI task, no wait for the event loop's next turn. The
            # cycle is still made (uvicorn drops the body it reads for a completed response), running an app that
            # does nothing.
            app = self.app
            self.app = _answered
            try:
                super().on_headers_complete()
            finally:
                self.app = app
            cycle = self.cycle
            cycle.response_started = cycle.response_complete = True
            if refused == "limit":  # the client's next request waits for Retry-After; an early one's does not
                cycle.scope[SHED_KEY] = True  # type: ignore[literal-required]
            self.transport.write(_OVERLOADED)
            guard.head_done()
            guard.body_done()
            self.on_response_complete()

        def _refuse_now(self) -> str | None:
            refuse = self.guard_stats.refuse
            early = self._guard.early
            parser = self.parser
            busy = self.cycle is not None and not self.cycle.response_complete  # pipelined: answers keep order
            if refuse is None or busy or not parser.should_keep_alive() or parser.should_upgrade():
                if early:  # not decided here (no gate here, or not answerable here): the app is told, as with h11
                    cast("dict[str, Any]", self.scope)[EARLY_KEY] = True
                return None
            path = httptools.parse_url(self.url).path.decode("latin-1")
            return refuse(parser.get_method(), unquote(path) if "%" in path else path, early)

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._guard.body_done()

        def on_response_complete(self) -> None:
            self._guard.response_done()
            super().on_response_complete()
            self._guard.after_response(self.cycle)
            self._guard.settle()

    return GuardedHttpToolsProtocol


def guarded_protocol(
    limits: ConnectionLimits, http: HttpImpl = "auto", stats: GuardStats | None = None
) -> type[asyncio.Protocol]:
    """The uvicorn HTTP protocol class (``http`` as uvicorn's ``http`` setting: auto = httptools when installed)
    with ``limits`` enforced; pass it as ``uvicorn.Config(http=...)``. ``limits.max_connections`` must be
    resolved (see :func:`resolve`)."""
    if limits.max_connections < 1:
        raise ValueError("resolve max_connections first")
    base: type[asyncio.Protocol]
    if http == "h11":
        base = GuardedH11Protocol
    elif http == "httptools":
        base = _httptools_class()
    else:
        try:
            base = _httptools_class()
        except ImportError:
            base = GuardedH11Protocol
    attrs = {"guard_stats": stats or GuardStats(limits)}
    return cast("type[asyncio.Protocol]", type(base.__name__, (base,), attrs))
