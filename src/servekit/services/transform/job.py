"""Run a transform job: take it up in the store, list and plan its objects, skip the finished ones, run the
rest on an engine, and settle its status.

Status at the end: Stopped after Ctrl-C; Failed when an object has no output (or nothing could run);
CompletedWithErrors when records went to errors files; Completed otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from servekit._utils.ctrl_c import CtrlC
from servekit.errors import ConfigError
from servekit.services.transform.capture import write_capture
from servekit.services.transform.engine import Engine, RunOptions, shard
from servekit.services.transform.object_runner import ObjectResult, ObjectTask
from servekit.services.transform.objects import (
    ERRORS_SUFFIX,
    InputError,
    InputObject,
    content_type_of,
    list_inputs,
    output_uri,
    overlaps,
)
from servekit.services.transform.progress import NullProgress, ProgressSink
from servekit.services.transform.records import JSON_KINDS
from servekit.services.transform.spec import BatchStrategy, EngineKind, SplitType, TransformSpec
from servekit.services.transform.status import JobStatus, ObjectStatus
from servekit.services.transform.store import JobStore
from servekit.serving.codecs.sagemaker import CSV as CSV_MEDIA
from servekit.serving.codecs.sagemaker import JSON as JSON_MEDIA
from servekit.serving.codecs.sagemaker import media_type
from servekit.storage import ObjectStorage, Storage

_BINARY_ACCEPT = "application/json"


@dataclass(slots=True)
class JobSummary:
    name: str
    status: JobStatus
    failure_reason: str = ""
    objects_total: int = 0
    objects_skipped: int = 0  # finished by an earlier run
    objects_done: int = 0  # finished by this run
    objects_failed: int = 0
    records: int = 0  # records out (this run)
    errors: int = 0  # records in errors files (this run)
    elapsed_s: float = 0.0
    output_path: str = ""
    notes: list[str] = field(default_factory=list)


def plan(spec: TransformSpec, objects: list[InputObject]) -> list[ObjectTask]:
    """One task per object: its content type and Accept resolved, its output names."""
    tasks = []
    for obj in objects:
        content_type = spec.content_type or content_type_of(obj.key)
        if not content_type:
            raise ConfigError(f"cannot tell the content type of {obj.key} from its name; give --content-type")
        media = media_type(content_type)
        if (spec.needs_records or spec.input_filter != "$") and media not in (*JSON_KINDS, CSV_MEDIA):
            raise ConfigError(
                f"InputFilter, OutputFilter and JoinSource need JSON, JSON Lines or CSV input; {obj.key} is {media}"
            )
        accept = spec.accept or (content_type if media in (*JSON_KINDS, CSV_MEDIA) else _BINARY_ACCEPT)
        tasks.append(
            ObjectTask(
                obj,
                content_type,
                accept,
                output_uri(spec.output_path, obj.key),
                output_uri(spec.output_path, obj.key, ERRORS_SUFFIX),
            )
        )
    return tasks


def check_output(spec: TransformSpec, storage: ObjectStorage | None = None) -> None:
    """Fail before any work when the output path cannot be written."""
    storage = storage or Storage()
    probe = storage.join(spec.output_path, f".servekit-probe-{spec.name}")
    try:
        storage.makedirs(spec.output_path)
        with storage.open(probe, "wb") as f:
            f.write(b"")
        storage.remove(probe)
    except OSError as exc:
        raise InputError(f"cannot write to the output path {spec.output_path}: {exc}") from None


def make_engine(options: RunOptions) -> Engine:
    if options.engine is EngineKind.RAY:
        from servekit.services.transform.engine_ray import RayEngine  # Ray is an optional extra

        return RayEngine(options)
    from servekit.services.transform.engine_local import LocalEngine

    return LocalEngine(options)


class _Collector:
    """Engine events → store rows, progress display and the summary."""

    def __init__(
        self, store: JobStore, summary: JobSummary, progress: ProgressSink, clock: Callable[[], float]
    ) -> None:
        self._store = store
        self._summary = summary
        self._progress = progress
        self._clock = clock
        self._live = 0
        self._last_write = clock()
        self.fatal: list[str] = []
        self.failed: list[ObjectResult] = []

    def on_progress(self, records: int, nbytes: int) -> None:
        self._live += records
        self._progress.advance(records, nbytes)
        now = self._clock()
        if now - self._last_write >= 0.5:
            self._store.set_live(self._summary.name, self._live)
            self._last_write = now

    def on_object(self, result: ObjectResult) -> None:
        if result.status is ObjectStatus.PENDING:  # stopped half-way: it runs again next time
            return
        self._store.record_objects(
            self._summary.name,
            [(result.key, result.status, result.instance, result.records, result.errors, result.message)],
        )
        self._live = max(0, self._live - result.records - result.errors)  # live = objects still running
        s = self._summary
        s.records += result.records
        s.errors += result.errors
        if result.status is ObjectStatus.DONE:
            s.objects_done += 1
            if result.message:
                s.notes.append(f"{result.key}: {result.message}")
        else:
            s.objects_failed += 1
            self.failed.append(result)
        self._progress.object_done(result)

    def on_fatal(self, instance: int, message: str) -> None:
        self.fatal.append(message)
        self._progress.note(message)

    def on_stopping(self) -> None:
        self._store.set_status(self._summary.name, JobStatus.STOPPING)
        self._progress.note("stopping: finishing the mini-batches in flight (Ctrl-C again to abandon them)")


def run_job(
    spec: TransformSpec,
    store: JobStore,
    options: RunOptions | None = None,
    progress: ProgressSink | None = None,
    engine: Engine | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> JobSummary:
    """Run (or resume) ``spec``; raises :class:`JobConflict` when another live process runs it."""
    options = options or RunOptions()
    progress = progress or NullProgress()
    started = clock()
    # From before the job is taken up (StopTransformJob then finds its pid) to its end, Ctrl-C is a request the
    # run reads between its steps and the engine while it runs, never an exception in the middle of a fork.
    with CtrlC() as ctrl_c:
        job = store.begin(spec, options.engine.value)
        summary = JobSummary(spec.name, job.status, output_path=spec.output_path)
        if job.status.terminal:
            summary.objects_total = summary.objects_skipped = job.objects_total
            summary.notes.append(f"job {spec.name!r} is already {job.status}; nothing to do")
            return summary
        try:
            return _run(spec, store, options, progress, engine, clock, summary, started, ctrl_c)
        except KeyboardInterrupt:  # an engine's interruptible region (Ray), or a caller's own handler
            progress.close()
            return _settle(store, summary, JobStatus.STOPPED, "stopped by the user", started, clock)


def _run(
    spec: TransformSpec,
    store: JobStore,
    options: RunOptions,
    progress: ProgressSink,
    engine: Engine | None,
    clock: Callable[[], float],
    summary: JobSummary,
    started: float,
    ctrl_c: CtrlC,
) -> JobSummary:
    begun = time.time()  # the hour a capture is labelled with: when the job (this run) started, UTC
    try:
        if overlaps(spec.input_uri, spec.output_path):
            raise InputError(f"the output path {spec.output_path} lies inside the input {spec.input_uri}")
        tasks = plan(spec, list_inputs(spec.input_uri, spec.data_type))
        check_output(spec)
    except (InputError, ConfigError) as exc:
        return _settle(store, summary, JobStatus.FAILED, str(exc), started, clock)
    if spec.split_type is SplitType.LINE and spec.batch_strategy is BatchStrategy.MULTI:
        if any(media_type(t.content_type) == JSON_MEDIA for t in tasks):
            summary.notes.append(
                "ContentType application/json with MultiRecord sends several JSON documents per request, which a "
                "JSON decoder refuses (each record is then sent alone); for one JSON value per line use "
                "application/jsonlines"
            )
    if ctrl_c.count:  # Ctrl-C while the objects were listed
        return _settle(store, summary, JobStatus.STOPPED, "stopped by the user", started, clock)
    done = store.done_keys(spec.name)
    todo = [t for t in tasks if t.obj.key not in done]
    store.set_total(spec.name, len(tasks))
    summary.objects_total = len(tasks)
    summary.objects_skipped = len(tasks) - len(todo)
    collector = _Collector(store, summary, progress, clock)
    progress.start(spec.name, len(tasks), summary.objects_skipped, sum(t.obj.size for t in todo))
    try:
        engine = engine or make_engine(options)
        stopped = engine.run(spec, shard(todo, spec.instance_count), collector, ctrl_c) if todo else False
    except ConfigError as exc:
        progress.close()
        return _settle(store, summary, JobStatus.FAILED, str(exc), started, clock)
    progress.close()
    if stopped:
        return _settle(store, summary, JobStatus.STOPPED, "stopped by the user", started, clock)
    missing = len(todo) - summary.objects_done - summary.objects_failed
    reasons = [*collector.fatal, *(f"{r.key}: {r.message}" for r in collector.failed)]
    if collector.failed or missing:
        head = f"{summary.objects_failed + missing} of {len(tasks)} object(s) have no output"
        return _settle(store, summary, JobStatus.FAILED, "; ".join([head, *reasons]), started, clock)
    job = store.get(spec.name)
    status = JobStatus.COMPLETED_WITH_ERRORS if job is not None and job.errors else JobStatus.COMPLETED
    if spec.capture_destination:
        try:
            write_capture(spec.capture_destination, spec.name, begun, [t.obj for t in tasks], spec.output_path)
        except OSError as exc:  # the outputs are there, but the capture Model Monitor would read is not
            reason = (
                f"DataCaptureConfig: the capture manifests could not be written to {spec.capture_destination}: {exc}"
            )
            return _settle(store, summary, JobStatus.FAILED, reason, started, clock)
    return _settle(store, summary, status, "", started, clock)


def _settle(
    store: JobStore, summary: JobSummary, status: JobStatus, reason: str, started: float, clock: Callable[[], float]
) -> JobSummary:
    store.set_status(summary.name, status, reason)
    summary.status = status
    summary.failure_reason = reason
    summary.elapsed_s = clock() - started
    return summary
