"""One object end to end on one loaded model: read → split → pack → invoke (bounded, in flight) → write in order.

Both engines call :class:`ObjectRunner`, so they give the same bytes. Mini-batches run on a thread pool of
``MaxConcurrentTransforms`` threads and are consumed in submission order, so at most that many are in
flight and the output keeps the input order whatever order they finish in.

A failed mini-batch (after retries) is split in halves until the failing records are alone; they go to the
errors file and the rest still comes out. In strict mode the first failed record fails the whole object
(SageMaker's behaviour: no output for that object).
"""

from __future__ import annotations

import re
import time
import zlib
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial

from servekit.errors import ServekitError
from servekit.services.transform.filters import FilterError, parse_path
from servekit.services.transform.invoke import TRANSPORT, Invoker, LineInvoker, call_with_retries
from servekit.services.transform.objects import InputObject, open_input
from servekit.services.transform.pack import MiniBatch, Rejected, pack
from servekit.services.transform.records import ShapeError, Shaper, input_filter
from servekit.services.transform.spec import BatchStrategy, SplitType, TransformSpec
from servekit.services.transform.split import FRAMINGS, LineNumbers, SplitError, read_records
from servekit.services.transform.status import ObjectStatus
from servekit.services.transform.writer import ObjectWriter, RecordError
from servekit.serving.codecs.sagemaker import CSV, media_type

Progress = Callable[[int, int], None]  # (records done, input bytes read) since the last call


@dataclass(frozen=True, slots=True)
class ObjectTask:
    obj: InputObject
    content_type: str
    accept: str
    output_uri: str
    errors_uri: str


@dataclass(slots=True)
class ObjectResult:
    key: str
    status: ObjectStatus
    records: int = 0  # records that came out
    errors: int = 0  # records in the errors file
    message: str = ""
    instance: int = 0


@dataclass(slots=True)
class _Outcome:
    data: bytes = b""
    ok: int = 0
    errors: list[RecordError] = field(default_factory=list)


class RecordFailed(Exception):
    """Strict mode: a record failed, so its object fails."""


class _Stopped(Exception):
    pass


class ObjectRunner:
    """Transforms objects one after another with one invoker (one loaded model)."""

    def __init__(
        self,
        spec: TransformSpec,
        invoker: Invoker,
        instance: int = 0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._spec = spec
        self._invoker = invoker
        self._instance = instance
        self._sleep = sleep
        self._pool = ThreadPoolExecutor(spec.max_concurrent_transforms, thread_name_prefix="transform")

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def run(
        self,
        task: ObjectTask,
        should_stop: Callable[[], bool] = lambda: False,
        on_progress: Progress | None = None,
    ) -> ObjectResult:
        result = ObjectResult(task.obj.key, ObjectStatus.FAILED, instance=self._instance)
        try:
            writer = ObjectWriter(task.output_uri, task.errors_uri, self._spec.name)
        except OSError as exc:
            result.message = f"cannot write {task.output_uri}: {exc}"
            return result
        try:
            self._run(task, writer, result, should_stop, on_progress or (lambda n, b: None))
        except _Stopped:
            writer.abort()
            result.status = ObjectStatus.PENDING
            result.message = "stopped"
        except RecordFailed as exc:
            writer.commit(keep_output=False)
            result.errors = writer.errors
            result.message = str(exc)
        except (SplitError, OSError, EOFError, zlib.error) as exc:  # broken framing, corrupt gzip, unreadable
            writer.abort()
            result.message = f"cannot read {task.obj.key}: {exc}"
        except BaseException:
            writer.abort()
            raise
        else:
            writer.commit()
            result.status = ObjectStatus.DONE
            result.errors = writer.errors
            if result.records == 0 and result.errors == 0:
                result.message = "the object holds no records; its output is empty"
        return result

    def _run(
        self,
        task: ObjectTask,
        writer: ObjectWriter,
        result: ObjectResult,
        should_stop: Callable[[], bool],
        on_progress: Progress,
    ) -> None:
        spec = self._spec
        framing = FRAMINGS[spec.split_type]
        shaper = Shaper.for_spec(spec, task.content_type, task.accept)
        prepare = (
            None
            if spec.input_filter == "$"
            else input_filter(parse_path(spec.input_filter), media_type(task.content_type))
        )
        limit = spec.max_payload_bytes
        in_flight = spec.max_concurrent_transforms
        pending: deque[Future[_Outcome] | _Outcome] = deque()
        read = 0
        numbers = LineNumbers() if spec.split_type is SplitType.LINE else None
        csv_input = media_type(task.content_type) == CSV

        def consume() -> None:
            nonlocal read
            head = pending.popleft()
            outcome = head.result() if isinstance(head, Future) else head
            writer.write(outcome.data)
            errors = outcome.errors
            if numbers is not None and errors:  # the records before these have been read: their lines are known
                errors = [at_line(e, numbers.line(e.index), csv_input) for e in errors]
            writer.write_errors(errors)
            if errors and spec.strict:
                first = errors[0]
                where = f"record {first.index} (line {first.line})" if first.line else f"record {first.index}"
                raise RecordFailed(f"{where}: {first.error}")
            result.records += outcome.ok
            position = counter.position
            on_progress(outcome.ok + len(outcome.errors), position - read)
            read = position

        with open_input(task.obj, spec.compression) as (stream, counter):
            try:
                items = pack(
                    read_records(stream, spec.split_type, limit, numbers=numbers),
                    framing,
                    spec.batch_strategy,
                    limit,
                    prepare,
                    keep_originals=shaper.join,
                )
                for item in items:
                    if should_stop():
                        raise _Stopped
                    if isinstance(item, Rejected):
                        error = _whole_object(item.error) if spec.split_type is SplitType.NONE else item.error
                        pending.append(_Outcome(errors=[RecordError(item.index, item.record, error)]))
                    else:
                        pending.append(self._pool.submit(self._batch, item, task, shaper))
                    while len(pending) >= in_flight or (pending and not isinstance(pending[0], Future)):
                        consume()
                while pending:
                    consume()
            finally:
                for f in pending:
                    if isinstance(f, Future):
                        f.cancel()
                for f in pending:  # let running batches end before the writer goes away
                    if isinstance(f, Future) and not f.cancelled():
                        f.exception()

    def _batch(self, batch: MiniBatch, task: ObjectTask, shaper: Shaper) -> _Outcome:
        spec = self._spec
        framing = FRAMINGS[spec.split_type]
        n = len(batch.records)
        invoker, ct, accept, records = self._invoker, task.content_type, task.accept, batch.records
        call: Callable[[], bytes]
        if spec.batch_strategy is BatchStrategy.SINGLE:
            body = framing.single(records[0])
            call = partial(invoker.invoke, body, ct, accept)
        elif spec.split_type is SplitType.LINE and isinstance(invoker, LineInvoker):
            call = partial(invoker.invoke_lines, records, ct, accept)  # the records are the body's lines
        else:
            call = partial(invoker.invoke, framing.multi(records), ct, accept)
        try:
            response = call_with_retries(call, spec.max_retries, self._sleep)
            return _Outcome(shaper.shape(response, batch.originals or (), n), n)
        except (ServekitError, ShapeError, FilterError) as exc:
            message = exc.message if isinstance(exc, ServekitError) else str(exc)
            transport = isinstance(exc, ServekitError) and exc.code in TRANSPORT
            if n == 1 or transport:
                originals = batch.originals or batch.records
                return _Outcome(errors=[RecordError(batch.first + i, r, message) for i, r in enumerate(originals)])
        half = n // 2
        left, right = _halves(batch, half)
        a, b = self._batch(left, task, shaper), self._batch(right, task, shaper)
        return _Outcome(a.data + b.data, a.ok + b.ok, a.errors + b.errors)


# A CSV record sent alone is line 1 of its request body: the codec's "CSV line 1" is the record's line in the file.
_REQUEST_LINE_1 = re.compile(r"\bCSV line 1\b")


def at_line(error: RecordError, line: int, csv_input: bool) -> RecordError:
    """``error`` numbered by the record's line in the object; a CSV record's message names that line too."""
    message = error.error
    if csv_input:
        if _REQUEST_LINE_1.search(message):
            message = _REQUEST_LINE_1.sub(f"CSV line {line}", message, count=1)
        else:
            message = f"CSV line {line}: {message}"
    return replace(error, line=line, error=message)


def _whole_object(error: str) -> str:
    if error.startswith("the record is"):
        return (
            "the object is larger than MaxPayloadInMB and SplitType is None (one request per object); split it "
            "with --split-type Line, RecordIO or TFRecord, or raise --max-payload-mb"
        )
    return error


def _halves(batch: MiniBatch, half: int) -> tuple[MiniBatch, MiniBatch]:
    o = batch.originals
    return (
        MiniBatch(batch.first, batch.records[:half], o[:half] if o is not None else None, 0),
        MiniBatch(batch.first + half, batch.records[half:], o[half:] if o is not None else None, 0),
    )
