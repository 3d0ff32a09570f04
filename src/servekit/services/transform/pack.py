"""Pack records into mini-batches: one per request (SingleRecord) or as many consecutive records as fit in
MaxPayloadInMB (MultiRecord). A record that alone exceeds the limit is rejected, in its place in the order."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import accumulate

from servekit.services.transform.spec import MB, BatchStrategy
from servekit.services.transform.split import Framing

Prepare = Callable[[bytes], bytes]  # the input filter; raises ValueError when a record does not fit it


@dataclass(slots=True)
class MiniBatch:
    first: int  # index of its first record in the object
    records: list[bytes]  # as the model gets them (input filter applied)
    originals: list[bytes] | None  # as read, when JoinSource needs them
    size: int  # bytes of the request


@dataclass(slots=True)
class Rejected:
    """A record that is never sent: over the payload limit, or the input filter does not fit it."""

    index: int
    record: bytes
    error: str


def too_large(size: int, limit: int) -> str:
    return f"the record is {size:,} bytes, over MaxPayloadInMB ({limit // MB} MiB = {limit:,} bytes)"


def pack(
    record_lists: Iterable[list[bytes]],
    framing: Framing,
    strategy: BatchStrategy,
    limit: int,
    prepare: Prepare | None = None,
    keep_originals: bool = False,
) -> Iterator[MiniBatch | Rejected]:
    """Mini-batches and rejections in record order. ``limit`` 0 means no limit."""
    if strategy is BatchStrategy.SINGLE:
        yield from _single(record_lists, framing, limit, prepare, keep_originals)
    elif prepare is None:
        yield from _multi_plain(record_lists, framing.overhead, limit or 1 << 62, keep_originals)
    else:
        yield from _multi(record_lists, framing, limit or 1 << 62, prepare, keep_originals)


def _single(
    record_lists: Iterable[list[bytes]], framing: Framing, limit: int, prepare: Prepare | None, keep: bool
) -> Iterator[MiniBatch | Rejected]:
    index = 0
    for records in record_lists:
        for original in records:
            record = original
            if prepare is not None:
                try:
                    record = prepare(original)
                except ValueError as exc:
                    yield Rejected(index, original, str(exc))
                    index += 1
                    continue
            body = framing.single(record)
            if limit and len(body) > limit:
                yield Rejected(index, original, too_large(len(body), limit))
            else:
                yield MiniBatch(index, [record], [original] if keep else None, len(body))
            index += 1


def _multi_plain(
    record_lists: Iterable[list[bytes]], overhead: int, limit: int, keep: bool
) -> Iterator[MiniBatch | Rejected]:
    """MultiRecord without an input filter: cut points found by bisecting running sizes (no per-record loop)."""
    batch: list[bytes] = []
    size = first = start = 0  # start: index in the object of records[0]
    for records in record_lists:
        n = len(records)
        ends = list(accumulate(map(len, records)))
        i = 0
        while i < n:
            base = ends[i - 1] if i else 0
            fits = bisect_right(range(1, n - i + 1), limit - size, key=lambda k: ends[i + k - 1] - base + k * overhead)
            if fits == 0:
                if batch:
                    yield MiniBatch(first, batch, batch if keep else None, size)
                    batch, size = [], 0
                    continue
                yield Rejected(start + i, records[i], too_large(len(records[i]) + overhead, limit))
                i += 1
                continue
            if not batch:
                first = start + i
            batch.extend(records[i : i + fits])
            size += ends[i + fits - 1] - base + fits * overhead
            i += fits
            if i < n:  # the next record does not fit: this request is full
                yield MiniBatch(first, batch, batch if keep else None, size)
                batch, size = [], 0
        start += n
    if batch:
        yield MiniBatch(first, batch, batch if keep else None, size)


def _multi(
    record_lists: Iterable[list[bytes]], framing: Framing, limit: int, prepare: Prepare | None, keep: bool
) -> Iterator[MiniBatch | Rejected]:
    overhead = framing.overhead
    batch: list[bytes] = []
    originals: list[bytes] | None = [] if keep else None
    size = first = index = 0
    for records in record_lists:
        for original in records:
            record = original
            if prepare is not None:
                try:
                    record = prepare(original)
                except ValueError as exc:
                    if batch:
                        yield MiniBatch(first, batch, originals, size)
                        batch, originals, size = [], [] if keep else None, 0
                    yield Rejected(index, original, str(exc))
                    index += 1
                    continue
            n = len(record) + overhead
            if size + n > limit:
                if batch:
                    yield MiniBatch(first, batch, originals, size)
                    batch, originals, size = [], [] if keep else None, 0
                if n > limit:
                    yield Rejected(index, original, too_large(n, limit))
                    index += 1
                    continue
            if not batch:
                first = index
            batch.append(record)
            if originals is not None:
                originals.append(original)
            size += n
            index += 1
    if batch:
        yield MiniBatch(first, batch, originals, size)
