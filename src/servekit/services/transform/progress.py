"""How a job reports progress: the sink protocol and a silent sink. Terminal displays live in the CLI."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from servekit.services.transform.object_runner import ObjectResult


class ProgressSink(Protocol):
    def start(self, name: str, objects_total: int, objects_skipped: int, bytes_todo: int) -> None: ...

    def advance(self, records: int, nbytes: int) -> None: ...

    def object_done(self, result: ObjectResult) -> None: ...

    def note(self, text: str) -> None: ...

    def close(self) -> None: ...


class NullProgress:
    def start(self, name: str, objects_total: int, objects_skipped: int, bytes_todo: int) -> None:
        pass

    def advance(self, records: int, nbytes: int) -> None:
        pass

    def object_done(self, result: ObjectResult) -> None:
        pass

    def note(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass


def data_log_path(home: Path, job: str) -> Path:
    """Where a job's data log goes (the ``<job>/<instance-id>/data-log`` stream of CloudWatch Logs)."""
    return home / "transform" / "data-logs" / f"{job}.log"


class DataLog:
    """The batch agent's own log, as SageMaker writes a transform job's ``data-log`` stream: a line per object done
    (its key, status, records and errors, and the reason of a failure) and every note, each stamped
    ``<ISO time>:[sagemaker logs]:``. Appended, so a resumed job continues its log."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8")
        self._clock = clock

    def _line(self, text: str) -> None:
        if self._file.closed:  # a note after the run closed its sinks (a resumed job's last words)
            return
        when = datetime.fromtimestamp(self._clock(), UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
        self._file.write(f"{when}:[sagemaker logs]: {text}\n")
        self._file.flush()

    def start(self, name: str, objects_total: int, objects_skipped: int, bytes_todo: int) -> None:
        self._line(f"job {name}: {objects_total} object(s), {objects_skipped} already done, {bytes_todo} bytes to read")

    def advance(self, records: int, nbytes: int) -> None:
        pass

    def object_done(self, result: ObjectResult) -> None:
        tail = f": {result.message}" if result.message else ""
        self._line(f"{result.key}: {result.status}, {result.records} record(s), {result.errors} error(s){tail}")

    def note(self, text: str) -> None:
        self._line(text)

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


class Tee:
    """Every sink hears every event (the terminal display and the data log)."""

    def __init__(self, *sinks: ProgressSink) -> None:
        self._sinks = sinks

    def start(self, name: str, objects_total: int, objects_skipped: int, bytes_todo: int) -> None:
        for s in self._sinks:
            s.start(name, objects_total, objects_skipped, bytes_todo)

    def advance(self, records: int, nbytes: int) -> None:
        for s in self._sinks:
            s.advance(records, nbytes)

    def object_done(self, result: ObjectResult) -> None:
        for s in self._sinks:
            s.object_done(result)

    def note(self, text: str) -> None:
        for s in self._sinks:
            s.note(text)

    def close(self) -> None:
        for s in self._sinks:
            s.close()
