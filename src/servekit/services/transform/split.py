"""Split an object's byte stream into records, streaming: never more than a chunk (or one record) in memory.

Records are yielded in lists (one list per chunk read) so the per-record cost stays a few list operations.
Each split type has a :class:`Framing` that says how many bytes a record adds to a MultiRecord request,
how records are concatenated into one, and what a SingleRecord request carries:

- ``Line``: records are lines without their ``\\n`` (and without a trailing ``\\r``); blank lines are not
  records (:class:`LineNumbers` keeps each record's line in the object). MultiRecord joins them with ``\\n``
  and ends the body with one.
- ``None``: the whole object is one record.
- ``RecordIO`` (MXNet/dmlc framing: magic ``0xced7230a``, ``lrecord`` with a 3-bit continuation flag and a
  29-bit length, data padded to 4 bytes) and ``TFRecord`` (uint64 length, masked CRC of the length, data,
  masked CRC of the data): a record is its whole frame. As in SageMaker, SingleRecord strips the framing
  and padding and MultiRecord keeps it. CRCs are not verified.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from typing import IO, Protocol

from servekit.services.transform.spec import SplitType

CHUNK = 1 << 20
RECORDIO_MAGIC = 0xCED7230A
_MAGIC_BYTES = struct.pack("<I", RECORDIO_MAGIC)
_LENGTH_MASK = (1 << 29) - 1
_RECORDS_PER_LIST = 1024
_MAX_TFRECORD = 1 << 30


class SplitError(ValueError):
    """The object's framing is broken (a truncated or corrupt RecordIO/TFRecord stream)."""


class LineNumbers:
    """The 1-based line of each record of a Line-split object: a record's index + 1, plus the blank lines
    (which are not records) before it. Only where blank lines were is anything kept."""

    def __init__(self) -> None:
        self._at: list[int] = []  # index of the first record after a run of blank lines
        self._skipped: list[int] = []  # blank lines before that record, in all

    def skip(self, next_index: int, count: int) -> None:
        """``count`` blank lines come before record ``next_index``."""
        total = (self._skipped[-1] if self._skipped else 0) + count
        if self._at and self._at[-1] == next_index:
            self._skipped[-1] = total
        else:
            self._at.append(next_index)
            self._skipped.append(total)

    def line(self, index: int) -> int:
        i = bisect_right(self._at, index)
        return index + 1 + (self._skipped[i - 1] if i else 0)


class Framing(Protocol):
    overhead: int  # bytes a record adds to a MultiRecord request beyond its own length

    def multi(self, records: Sequence[bytes]) -> bytes: ...

    def single(self, record: bytes) -> bytes: ...


class LineFraming:
    overhead = 1

    @staticmethod
    def multi(records: Sequence[bytes]) -> bytes:
        return b"\n".join(records) + b"\n"

    @staticmethod
    def single(record: bytes) -> bytes:
        return record


class WholeFraming:
    overhead = 0

    @staticmethod
    def multi(records: Sequence[bytes]) -> bytes:
        return b"".join(records)

    @staticmethod
    def single(record: bytes) -> bytes:
        return record


class RecordIOFraming(WholeFraming):
    @staticmethod
    def single(record: bytes) -> bytes:
        """The record's data: a multi-part record's parts joined by the magic number they were split at."""
        parts, pos = [], 0
        while pos < len(record):
            (lrec,) = struct.unpack_from("<I", record, pos + 4)
            length = lrec & _LENGTH_MASK
            parts.append(record[pos + 8 : pos + 8 + length])
            pos += 8 + ((length + 3) & ~3)
        return parts[0] if len(parts) == 1 else _MAGIC_BYTES.join(parts)


class TFRecordFraming(WholeFraming):
    @staticmethod
    def single(record: bytes) -> bytes:
        return record[12:-4]


FRAMINGS: dict[SplitType, Framing] = {
    SplitType.LINE: LineFraming(),
    SplitType.NONE: WholeFraming(),
    SplitType.RECORDIO: RecordIOFraming(),
    SplitType.TFRECORD: TFRecordFraming(),
}


def read_records(
    stream: IO[bytes],
    split: SplitType,
    limit: int = 0,
    chunk_size: int = CHUNK,
    numbers: LineNumbers | None = None,
) -> Iterator[list[bytes]]:
    """Lists of records in order. With SplitType None and a ``limit``, at most ``limit + 1`` bytes are read:
    a longer object comes out as one record of ``limit + 1`` bytes, which the packer rejects. ``numbers``
    learns each Line record's line in the object as the records are read."""
    if split is SplitType.LINE:
        return _lines(stream, chunk_size, numbers or LineNumbers())
    if split is SplitType.NONE:
        return _whole(stream, limit)
    if split is SplitType.RECORDIO:
        return _recordio(stream)
    return _tfrecord(stream)


def _lines(stream: IO[bytes], chunk_size: int, numbers: LineNumbers) -> Iterator[list[bytes]]:
    pending: list[bytes] = []  # the start of a line that has not ended yet
    count = 0  # records so far
    while True:
        chunk = stream.read(chunk_size)
        if not chunk:
            break
        cut = chunk.rfind(b"\n")
        if cut < 0:
            pending.append(chunk)
            continue
        if pending:
            pending.append(chunk)
            chunk = b"".join(pending)
            pending = []
        lines = chunk.split(b"\n")
        rest = lines.pop()
        if rest:
            pending.append(rest)
        records = _clean(lines, b"\r" in chunk, numbers, count)
        count += len(records)
        yield records
    if pending:
        last = _clean([b"".join(pending)], True, numbers, count)
        if last:
            yield last


def _clean(lines: list[bytes], has_cr: bool, numbers: LineNumbers, first: int) -> list[bytes]:
    """The records among ``lines`` (the first being record ``first``), the blank lines told to ``numbers``."""
    if has_cr:
        lines = [line[:-1] if line.endswith(b"\r") else line for line in lines]
    records = [line for line in lines if line and not line.isspace()]
    if len(records) != len(lines):  # rare: find where the blank lines were
        index = first
        for line in lines:
            if line and not line.isspace():
                index += 1
            else:
                numbers.skip(index, 1)
    return records


def _whole(stream: IO[bytes], limit: int) -> Iterator[list[bytes]]:
    data = stream.read(limit + 1) if limit else stream.read()
    if data:
        yield [data]


def _read_exact(stream: IO[bytes], n: int, what: str, offset: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise SplitError(f"truncated {what} at byte {offset}: wanted {n} bytes, the object ends after {len(data)}")
    return data


def _recordio(stream: IO[bytes]) -> Iterator[list[bytes]]:
    batch: list[bytes] = []
    frames: list[bytes] = []
    offset = 0
    while True:
        head = stream.read(8)
        if not head:
            break
        if len(head) < 8:
            raise SplitError(f"truncated RecordIO header at byte {offset}")
        magic, lrec = struct.unpack("<II", head)
        if magic != RECORDIO_MAGIC:
            raise SplitError(f"bad RecordIO magic 0x{magic:08x} at byte {offset} (expected 0x{RECORDIO_MAGIC:08x})")
        flag, length = lrec >> 29, lrec & _LENGTH_MASK
        padded = (length + 3) & ~3
        frames.append(head + _read_exact(stream, padded, "RecordIO record", offset))
        offset += 8 + padded
        if flag in (0, 3):  # a whole record, or the last part of a split one
            batch.append(frames[0] if len(frames) == 1 else b"".join(frames))
            frames = []
            if len(batch) >= _RECORDS_PER_LIST:
                yield batch
                batch = []
        elif flag not in (1, 2):
            raise SplitError(f"bad RecordIO continuation flag {flag} at byte {offset}")
    if frames:
        raise SplitError("the RecordIO stream ends inside a multi-part record")
    if batch:
        yield batch


def _tfrecord(stream: IO[bytes]) -> Iterator[list[bytes]]:
    batch: list[bytes] = []
    offset = 0
    while True:
        head = stream.read(12)
        if not head:
            break
        if len(head) < 12:
            raise SplitError(f"truncated TFRecord header at byte {offset}")
        (length,) = struct.unpack_from("<Q", head)
        if length > _MAX_TFRECORD:
            raise SplitError(f"implausible TFRecord length {length} at byte {offset}: the stream is corrupt")
        body = _read_exact(stream, length + 4, "TFRecord record", offset)
        batch.append(head + body)
        offset += 16 + length
        if len(batch) >= _RECORDS_PER_LIST:
            yield batch
            batch = []
    if batch:
        yield batch
