"""Live progress of a transform job on a terminal (records/s, objects done, ETA) and the texts of summaries."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from servekit.services.transform.object_runner import ObjectResult
from servekit.services.transform.status import ObjectStatus

# rich's progress and table modules are imported where used: a run that shows no live progress (--quiet, or not a
# terminal) prints no table either, and skips their import at start.
if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import TaskID
    from rich.table import Table

    from servekit.services.transform.job import JobSummary
    from servekit.services.transform.store import JobRecord, ObjectRecord


class RichProgress:
    """One bar over the input bytes; records/s over the whole run; ETA from the byte rate."""

    def __init__(self, console: Console, clock: Callable[[], float] = time.monotonic) -> None:
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

        self._console = console
        self._clock = clock
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TextColumn("{task.fields[records]:,} records  {task.fields[rate]:,.0f}/s"),
            TextColumn("objects {task.fields[done]}/{task.fields[objects]}"),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self._task: TaskID | None = None
        self._running = False
        self._records = 0
        self._done = 0
        self._started = 0.0

    def start(self, name: str, objects_total: int, objects_skipped: int, bytes_todo: int) -> None:
        if objects_skipped:
            self._console.print(f"{name}: {objects_skipped} of {objects_total} object(s) already done, skipped")
        self._done = objects_skipped
        self._started = self._clock()
        self._task = self._progress.add_task(
            name, total=max(bytes_todo, 1), records=0, rate=0.0, done=self._done, objects=objects_total
        )

    def _live(self) -> None:
        """The display thread starts with the first event: after the engine has forked its instances."""
        if not self._running:
            self._running = True
            self._progress.start()

    def _fields(self, **fields: Any) -> None:
        if self._task is not None:
            self._progress.update(self._task, **fields)

    def advance(self, records: int, nbytes: int) -> None:
        if self._task is None:
            return
        self._live()
        self._records += records
        elapsed = max(self._clock() - self._started, 1e-9)
        self._progress.update(self._task, advance=nbytes, records=self._records, rate=self._records / elapsed)

    def object_done(self, result: ObjectResult) -> None:
        self._live()
        self._done += 1
        self._fields(done=self._done)
        if result.status is ObjectStatus.FAILED:
            self._progress.console.print(f"[red]failed[/red] {result.key}: {result.message}")

    def note(self, text: str) -> None:
        self._progress.console.print(text)

    def close(self) -> None:
        if self._running:
            self._progress.stop()
            self._running = False


def _when(ts: float | None) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S") if ts else "-"


def summary_text(s: JobSummary) -> str:
    rate = s.records / s.elapsed_s if s.elapsed_s > 0 else 0.0
    shown = f"{rate:,.0f}" if rate >= 10 else f"{rate:.2f}"  # 3 records in 8 s: 0.38, not 0
    lines = [
        f"job {s.name}: {s.status}",
        f"  objects: {s.objects_done} done, {s.objects_failed} failed, {s.objects_skipped} skipped "
        f"(already done) of {s.objects_total}",
        f"  records: {s.records:,} out, {s.errors:,} in errors files; {s.elapsed_s:.1f}s ({shown} records/s)",
        f"  output: {s.output_path}",
    ]
    if s.failure_reason:
        lines.append(f"  reason: {s.failure_reason}")
    lines += [f"  note: {n}" for n in s.notes[:20]]
    if len(s.notes) > 20:
        lines.append(f"  ... and {len(s.notes) - 20} more notes")
    return "\n".join(lines)


def job_table(job: JobRecord, objects: list[ObjectRecord]) -> Table:
    from rich.table import Table

    spec = job.spec
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    rows = [
        ("name", job.name),
        ("status", str(job.status)),
        ("reason", job.failure_reason or "-"),
        ("model", spec.model or spec.endpoint_url),
        ("input", f"{spec.input_uri} ({spec.data_type}, split {spec.split_type}, {spec.batch_strategy})"),
        ("output", spec.output_path),
        ("objects", f"{job.objects_done} done, {job.objects_failed} failed, {job.objects_total} in all"),
        ("records", f"{job.records + job.records_live:,} out, {job.errors:,} in errors files"),
        ("engine", f"{job.engine or '-'}, {spec.instance_count} instance(s)"),
        ("created", _when(job.created)),
        ("started", _when(job.started)),
        ("ended", _when(job.ended)),
    ]
    for k, v in rows:
        head.add_row(k, v)
    table = Table(title=None, show_edge=False)
    for col in ("object", "status", "instance", "records", "errors", "message"):
        table.add_column(col)
    for o in objects:
        table.add_row(o.key, str(o.status), str(o.instance), f"{o.records:,}", f"{o.errors:,}", o.message)
    outer = Table.grid()
    outer.add_row(head)
    if objects:
        outer.add_row("")
        outer.add_row(table)
    return outer


def jobs_table(jobs: list[JobRecord]) -> Table:
    from rich.table import Table

    table = Table(show_edge=False)
    for col in ("name", "status", "objects", "records", "errors", "created", "ended"):
        table.add_column(col)
    for j in jobs:
        table.add_row(
            j.name,
            str(j.status),
            f"{j.objects_done}/{j.objects_total}",
            f"{j.records + j.records_live:,}",
            f"{j.errors:,}",
            _when(j.created),
            _when(j.ended),
        )
    return table
