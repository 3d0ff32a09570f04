"""The capture writer: a bounded buffer drained by one background thread into hourly partition files, in
SageMaker's JSON Lines layout (the default) or servekit's Parquet layout (``capture.parquet``).

Requests only pay for a random draw and a non-blocking ``put``; when the buffer is full the record is
dropped and counted. Files are written under a hidden temporary name and renamed (or uploaded, for
remote destinations) when closed, so readers only ever see whole files. ``close()`` flushes everything.

**When records become readable.** ``CaptureConfig.flush_seconds`` (5 s by default) is the most a captured
record waits before its file is published. The writer thread sleeps until the oldest open file is due, with or
without further traffic, and seals it :func:`seal_after` seconds after its first record: ``flush_seconds`` less
a margin for the rename or upload (1 s, a fifth of a shorter ``flush_seconds``). A file whose publish fails is
removed (its records are counted as dropped), so no hidden temporary file outlives its writer's attempt.
"""

from __future__ import annotations

import logging
import os
import queue
import random
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import numpy.typing as npt
import orjson

from servekit.config.models import CaptureConfig
from servekit.serving.capture.parquet import ParquetBuffer, require_pyarrow
from servekit.serving.capture.record import TENSOR_CONTENT_TYPE, capture_record, partition, tensors_body
from servekit.storage import ObjectStorage, Storage

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Item:
    """One exchange waiting for the writer thread: bytes as they were, or tensors encoded there."""

    when: datetime
    model: str
    version: int
    input_type: str | None
    input_body: bytes | Mapping[str, npt.NDArray[Any]] | None
    output_type: str | None
    output_body: bytes | Mapping[str, npt.NDArray[Any]] | None
    inference_id: str | None = None


def _body(key: str, value: bytes | Mapping[str, npt.NDArray[Any]] | None) -> bytes | None:
    return tensors_body(key, value) if isinstance(value, Mapping) else value


@dataclass(slots=True)
class _OpenFile:
    handle: IO[bytes] | None  # JSON Lines: appended record by record
    tmp: Path
    final: str
    opened: float
    records: int = 0
    parquet: ParquetBuffer | None = None  # Parquet: buffered, written whole when the file is closed


# A Parquet file is written whole when it closes, so its rows wait in memory: close it at this many rows.
PARQUET_MAX_ROWS = 65536
# Time kept for publishing (a rename, or an upload) within flush_seconds.
PUBLISH_MARGIN_S = 1.0


def seal_after(flush_seconds: float) -> float:
    """How long a file stays open so that its records are readable within ``flush_seconds``: that, less the
    publish margin (1 s, or a fifth of a ``flush_seconds`` under 5 s)."""
    return flush_seconds - min(PUBLISH_MARGIN_S, flush_seconds / 5)


class CaptureWriter:
    def __init__(
        self,
        cfg: CaptureConfig,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        monotonic: Callable[[], float] = time.monotonic,
        storage: ObjectStorage | None = None,
        staging: Path | None = None,
    ) -> None:
        self.cfg = cfg
        self._storage = storage or Storage()
        self._now = now
        self._monotonic = monotonic
        self._rng = random.Random(cfg.seed)
        self._queue: queue.Queue[_Item | None] = queue.Queue(maxsize=cfg.buffer_records)
        self._open: dict[str, _OpenFile] = {}
        self._seal_after = seal_after(cfg.flush_seconds)
        self._remote = "://" in cfg.destination and not cfg.destination.startswith("file://")
        root = cfg.destination.removeprefix("file://")
        # Local destinations stage beside the final files (publishing is a rename); remote ones in a local cache.
        remote_staging = staging or Path(os.path.expanduser("~/.cache/servekit-capture"))
        self._staging = Path(root) if not self._remote else remote_staging
        self._pid = os.getpid()
        self._parquet = cfg.format == "parquet"
        if self._parquet:  # fail at startup, not on the first captured request
            require_pyarrow()
        # An endpoint's instances capture under ``<endpoint>/<variant>``: the variant goes into Parquet rows.
        self._variant = cfg.partition_prefix.rsplit("/", 1)[-1] if cfg.partition_prefix else None
        self.captured = 0
        self.dropped = 0
        self.sampled_out = 0
        self._thread = threading.Thread(target=self._run, name="servekit-capture", daemon=True)
        self._started = False

    def start(self) -> None:
        if not self._started:
            self._started = True
            self._thread.start()

    def offer_tensors(
        self,
        model: str,
        version: int,
        inputs: Mapping[str, npt.NDArray[Any]],
        outputs: Mapping[str, npt.NDArray[Any]],
        inference_id: str | None = None,
    ) -> bool:
        """Called on the request path: sample, then hand the tensors over without encoding or blocking."""
        return self._offer(model, version, TENSOR_CONTENT_TYPE, inputs, TENSOR_CONTENT_TYPE, outputs, inference_id)

    def offer_bytes(
        self,
        model: str,
        version: int,
        input_type: str,
        input_body: bytes,
        output_type: str,
        output_body: bytes,
        inference_id: str | None = None,
    ) -> bool:
        """Called on the request path: sample, then hand the bodies over without blocking."""
        return self._offer(model, version, input_type, input_body, output_type, output_body, inference_id)

    def _offer(
        self,
        model: str,
        version: int,
        input_type: str,
        input_body: bytes | Mapping[str, npt.NDArray[Any]],
        output_type: str,
        output_body: bytes | Mapping[str, npt.NDArray[Any]],
        inference_id: str | None = None,
    ) -> bool:
        if self.cfg.sampling_percentage < 100.0 and self._rng.random() * 100.0 >= self.cfg.sampling_percentage:
            self.sampled_out += 1
            return False
        item = _Item(
            self._now(),
            model,
            version,
            input_type if self.cfg.capture_input else None,
            input_body if self.cfg.capture_input else None,
            output_type if self.cfg.capture_output else None,
            output_body if self.cfg.capture_output else None,
            inference_id,
        )
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            self.dropped += 1
            return False
        return True

    # ---- the writer thread ------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            try:  # until the next record, or until the oldest open file is due
                item = self._queue.get(timeout=self.wait_seconds())
            except queue.Empty:
                item = ...  # type: ignore[assignment]
            if item is None:
                break
            if isinstance(item, _Item):
                try:
                    self._write(item)
                    if self._queue.empty():  # caught up: the lines on disk, so a reader can count them
                        self._flush_open()
                except OSError as exc:  # a full disk must not kill capture for good; count and go on
                    self.dropped += 1
                    log.warning("capture write failed: %s", exc)
            self._rotate(force=False)
        while True:  # drain what is left after close()
            try:
                rest = self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(rest, _Item):
                try:
                    self._write(rest)
                except OSError as exc:
                    self.dropped += 1
                    log.warning("capture write failed: %s", exc)
        self._rotate(force=True)

    def _write(self, item: _Item) -> None:
        part = partition(item.model, item.version, item.when, self.cfg.partition_prefix)
        f = self._open.get(part)
        if f is None:
            f = self._open_file(part, item.when)
            self._open[part] = f
        if f.parquet is not None:
            event_id = str(uuid.uuid4())
            f.parquet.add(
                item.when,
                event_id,
                item.inference_id,
                item.model,
                item.version,
                item.input_type,
                item.input_body,
                item.output_type,
                item.output_body,
            )
            f.records += 1
            self.captured += 1
            if f.parquet.rows >= PARQUET_MAX_ROWS:
                del self._open[part]
                self._close_file(f)
            return
        assert f.handle is not None
        in_body = (
            item.input_body if not isinstance(item.input_body, Mapping) else tensors_body("inputs", item.input_body)
        )
        out_body = (
            item.output_body if not isinstance(item.output_body, Mapping) else tensors_body("outputs", item.output_body)
        )
        record = capture_record(
            item.when, item.input_type, in_body, item.output_type, out_body, inference_id=item.inference_id
        )
        f.handle.write(orjson.dumps(record) + b"\n")
        f.records += 1
        self.captured += 1

    def _open_file(self, part: str, when: datetime) -> _OpenFile:
        ext = "parquet" if self._parquet else "jsonl"
        name = f"{when.astimezone(UTC):%M-%S}-{self._pid}-{uuid.uuid4().hex[:12]}.{ext}"
        tmp_dir = self._staging / part
        tmp_dir.mkdir(parents=True, exist_ok=True)
        tmp = tmp_dir / f".{name}.tmp"
        final = f"{self.cfg.destination.rstrip('/')}/{part}/{name}"
        if self._parquet:
            return _OpenFile(None, tmp, final, self._monotonic(), parquet=ParquetBuffer(self._variant))
        return _OpenFile(tmp.open("wb"), tmp, final, self._monotonic())

    def _flush_open(self) -> None:
        for f in self._open.values():
            if f.handle is not None:
                f.handle.flush()

    def wait_seconds(self) -> float | None:
        """Seconds until the oldest open file is due to be sealed (0 when overdue); None when none is open (the
        writer thread then waits for the next record only)."""
        if not self._open:
            return None
        due = min(f.opened for f in self._open.values()) + self._seal_after
        return max(0.0, due - self._monotonic())

    def _rotate(self, force: bool) -> None:
        now = self._monotonic()
        for part, f in list(self._open.items()):
            if force or now - f.opened >= self._seal_after:
                del self._open[part]
                self._close_file(f)

    def _close_file(self, f: _OpenFile) -> None:
        try:
            self._publish(f)
        except Exception as exc:  # a full disk or a lost bucket must not end capture: count and go on
            self.dropped += f.records
            self.captured -= f.records
            log.warning("capture could not publish %s (%d records dropped): %s", f.final, f.records, exc)
            try:  # its records are counted as dropped: no hidden file may look as if it were still being written
                f.tmp.unlink(missing_ok=True)
            except OSError:
                pass

    def _publish(self, f: _OpenFile) -> None:
        if f.parquet is not None:
            f.parquet.write(f.tmp)
        else:
            assert f.handle is not None
            f.handle.close()
        if self._remote:
            self._storage.put_file(f.tmp, f.final)
            f.tmp.unlink()
        else:  # staged beside its final name: publishing is an atomic rename
            self._storage.rename(str(f.tmp), str(f.tmp.with_name(f.tmp.name[1:].removesuffix(".tmp"))))

    def close(self, timeout: float = 30.0) -> None:
        """Stop accepting, write everything buffered, close and publish every file."""
        if not self._started:
            return
        deadline = time.monotonic() + timeout
        while self._thread.is_alive():  # the buffer may be full: wait for room, but only while it drains
            try:
                self._queue.put(None, timeout=0.1)
                break
            except queue.Full:
                if time.monotonic() > deadline:
                    log.warning("capture did not drain within %.0fs; %d records lost", timeout, self._queue.qsize())
                    return
        self._thread.join(max(0.0, deadline - time.monotonic()))
