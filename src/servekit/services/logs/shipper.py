"""The shipper: follows the output files of instances and jobs into CloudWatch Logs' groups and streams.

What it follows comes from **sources**: ``(group, stream, path)``. A job registers its files with one call,
:meth:`LogShipper.register` (training: ``register(training_group(), f"{job}/algo-1-{epoch}", path)``), and
unregisters them when it ends; *providers* (callables answering the current sources, polled every pass) announce
what the plane already knows, such as every instance of every endpoint (``servekit up`` wires them,
:mod:`servekit.launch.logs`). A source that is no longer announced is read until its file has not grown for
``linger_s`` (what a process wrote while stopping is kept), its last line included even without a newline, and is
then let go.

Each pass reads what each file gained since the last (whole lines only, at most ``read_bytes`` per file), stamps
each line (:mod:`servekit.services.logs.lines`) and stores every file's new events **with its new offset in one
transaction**: a restart resumes each file where the stored events end, so no line is stored twice or lost. A
file that was replaced (another inode) or truncated is read again from its start. Files are read and written off
the event loop, on the shipper's own connection to the state.

The same loop enforces retention (:mod:`servekit.services.logs.retention`) every ``retention.interval_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from servekit._utils.background import BackgroundLoop
from servekit.services.logs.lines import LineTimes, split_lines
from servekit.services.logs.retention import RetentionLimits
from servekit.services.logs.store import Logs, OffsetRow, StreamBatch

__all__ = [
    "ENDPOINTS_PREFIX",
    "PROCESSING_GROUP",
    "TRAINING_GROUP",
    "TRANSFORM_GROUP",
    "LogShipper",
    "LogSource",
    "SourceProvider",
    "endpoint_group",
]

log = logging.getLogger(__name__)

ENDPOINTS_PREFIX = "/aws/sagemaker/Endpoints/"
TRANSFORM_GROUP = "/aws/sagemaker/TransformJobs"
TRAINING_GROUP = "/aws/sagemaker/TrainingJobs"
PROCESSING_GROUP = "/aws/sagemaker/ProcessingJobs"


def endpoint_group(endpoint: str) -> str:
    return ENDPOINTS_PREFIX + endpoint


@dataclass(frozen=True, slots=True)
class LogSource:
    """A file whose lines go to ``stream`` of ``group``."""

    group: str
    stream: str
    path: str


SourceProvider = Callable[[], Iterable[LogSource]]


@dataclass(slots=True)
class _Tail:
    source: LogSource
    inode: int
    position: int
    quiet_since: float  # when the file last grew (or the tail was made)
    announced: bool = True


class LogShipper(BackgroundLoop):
    def __init__(
        self,
        repo: Logs,
        providers: Sequence[SourceProvider] = (),
        *,
        interval_s: float = 0.25,
        linger_s: float = 5.0,
        read_bytes: int = 8 * 2**20,
        retention: RetentionLimits | None = None,
    ) -> None:
        self.repo = repo
        self.clock = repo.clock
        self.providers: list[SourceProvider] = list(providers)
        self.interval_s = interval_s
        self.linger_s = linger_s
        self.read_bytes = read_bytes
        self.retention = retention or RetentionLimits()
        self._registered: dict[str, LogSource] = {}
        self._tails: dict[str, _Tail] = {}
        self._times: dict[str, LineTimes] = {}
        self._lock = threading.Lock()  # one pass at a time (a cancelled pass's thread may still be finishing)
        self._pruned_at: float | None = None
        self._loaded = False

    # ---- sources ---------------------------------------------------------------------------------------------
    def register(self, group: str, stream: str, path: str | os.PathLike[str]) -> None:
        """Follow ``path`` into ``stream`` of ``group`` from now on (it may not exist yet), until
        :meth:`unregister`; registering it again changes nothing."""
        path = os.fspath(path)
        self._registered[path] = LogSource(group, stream, path)

    def unregister(self, path: str | os.PathLike[str]) -> None:
        """Stop following ``path`` once what it holds is read (after ``linger_s`` without growth)."""
        self._registered.pop(os.fspath(path), None)

    def add_provider(self, provider: SourceProvider) -> None:
        self.providers.append(provider)

    def announced(self) -> list[LogSource]:
        """What to follow now: the registered files and every provider's (a failing provider is skipped)."""
        sources = list(self._registered.values())
        for provider in self.providers:
            try:
                sources += list(provider())
            except Exception:
                log.exception("a log source provider failed; its files are not followed this pass")
        return sources

    # ---- the loop --------------------------------------------------------------------------------------------
    async def run(self) -> None:
        while True:
            busy = False
            try:
                busy = await asyncio.to_thread(self.ship, self.announced())
            except Exception:
                log.exception("shipping logs failed; retrying")
            if not busy:  # a pass that hit read_bytes goes again at once: the files are ahead of it
                await asyncio.sleep(self.interval_s)

    async def close(self) -> None:
        """Stop the loop, then ship what the files hold now (their last lines included)."""
        await super().close()
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self.ship, self.announced(), True)

    def ship(self, sources: Iterable[LogSource], final: bool = False) -> bool:
        """One pass over ``sources`` (and the files still lingering); True when some file had more to read than
        one pass reads. ``final``: read every file to its end, last partial line included."""
        with self._lock:
            return self._pass(list(sources), final)

    def drain(self, source: LogSource) -> None:
        """Read ``source``'s file to its end now, its last partial line included, and store it: a job that ended
        has its whole output in its stream before its status says it ended (the SDK reads once more, then stops)."""
        with self._lock:
            now = self.clock()
            tail = self._tails.get(source.path)
            if tail is None:
                tail = self._tails[source.path] = self._new_tail(source, now)
            more = True
            while more:
                events, more, moved = self._read(tail, int(self.clock() * 1000), whole=True)
                batches = [StreamBatch(source.group, source.stream, events)] if events else []
                if moved:
                    tail.quiet_since = now
                    offsets = [OffsetRow(source.path, source.group, source.stream, tail.inode, tail.position, False)]
                    self.repo.put(batches, offsets)

    def ship_once(self, final: bool = False) -> bool:
        """One pass over what is announced now (tests, benchmarks: the loop does this every ``interval_s``)."""
        return self.ship(self.announced(), final)

    # ---- one pass --------------------------------------------------------------------------------------------
    def _pass(self, sources: list[LogSource], final: bool) -> bool:
        now = self.clock()
        if not self._loaded:  # what a previous run was still following: finished, or announced again below
            for row in self.repo.followed():
                self._tails[row.path] = _Tail(LogSource(row.group, row.stream, row.path), row.inode, row.position, now)
            for tail in self._tails.values():
                tail.announced = False
            self._loaded = True
        wanted = {s.path: s for s in sources}
        for path, source in wanted.items():
            known = self._tails.get(path)
            if known is None:
                self._tails[path] = self._new_tail(source, now)
            else:
                known.source, known.announced = source, True
        for path, tail in self._tails.items():
            if path not in wanted:
                tail.announced = False
        read_ms = int(now * 1000)
        batches: list[StreamBatch] = []
        offsets: list[OffsetRow] = []
        finished: list[str] = []
        busy = False
        for path, tail in self._tails.items():
            ending = final or (not tail.announced and now - tail.quiet_since >= self.linger_s)
            events, more, moved = self._read(tail, read_ms, whole=ending)
            if moved:
                tail.quiet_since = now
            if more:
                busy = True
            done = ending and not more and not tail.announced
            if events:
                batches.append(StreamBatch(tail.source.group, tail.source.stream, events))
            if moved or done:
                s = tail.source
                offsets.append(OffsetRow(path, s.group, s.stream, tail.inode, tail.position, done))
            if done:
                finished.append(path)
        if batches or offsets:
            self.repo.put(batches, offsets)
        for path in finished:
            del self._tails[path]
            self._times.pop(path, None)
        self._prune(now)
        return busy

    def _new_tail(self, source: LogSource, now: float) -> _Tail:
        row = self.repo.offset(source.path)
        if row is None:
            return _Tail(source, 0, 0, now)
        return _Tail(source, row.inode, row.position, now)

    def _read(self, tail: _Tail, read_ms: int, whole: bool) -> tuple[list[tuple[int, str]], bool, bool]:
        """The events the file gained (whole lines, or up to its end when ``whole``), whether more is left to
        read, and whether the tail moved (its offset or file changed)."""
        path = tail.source.path
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                moved = False
                if st.st_ino != tail.inode or st.st_size < tail.position:  # a new file, or truncated: from its start
                    if tail.inode or tail.position:
                        log.info("log file %s was replaced or truncated; reading it from its start", path)
                    tail.inode, tail.position, moved = st.st_ino, 0, True
                if st.st_size <= tail.position:
                    return [], False, moved
                f.seek(tail.position)
                data = f.read(min(st.st_size - tail.position, self.read_bytes))
        except FileNotFoundError:
            return [], False, False
        except OSError as exc:
            log.warning("cannot read log file %s: %s", path, exc)
            return [], False, False
        more = tail.position + len(data) < st.st_size
        cut = data.rfind(b"\n") + 1
        if cut == 0 and len(data) < self.read_bytes and not whole:
            return [], more, moved  # a line still being written
        if cut and not (whole and not more):
            data = data[:cut]
        tail.position += len(data)
        times = self._times.setdefault(path, LineTimes())
        return split_lines(data, times, read_ms), more, True

    def _prune(self, now: float) -> None:
        limits = self.retention
        if self._pruned_at is not None and now - self._pruned_at < limits.interval_s:
            return
        self._pruned_at = now
        if limits.max_bytes is None and limits.max_age_days is None and not self._any_policy():
            return
        dropped = self.repo.prune(limits.max_age_days, limits.max_bytes)
        if dropped:
            log.info("log retention dropped %d event(s)", dropped)

    def _any_policy(self) -> bool:
        return any(g.retention_days is not None for g in self.repo.all_groups())
