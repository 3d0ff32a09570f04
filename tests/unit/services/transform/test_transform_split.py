"""Splitting objects into records (Line, None, RecordIO, TFRecord), streaming, and packing them into requests."""

from __future__ import annotations

import gzip
import io
import struct
from pathlib import Path

import pytest

from servekit.services.transform.objects import InputObject, open_input
from servekit.services.transform.pack import MiniBatch, Rejected, pack
from servekit.services.transform.spec import MB, BatchStrategy, Compression, SplitType
from servekit.services.transform.split import FRAMINGS, SplitError, read_records
from servekit.testing.transform import recordio, tfrecord


class CountingStream(io.BytesIO):
    """Remembers the largest single read, to show nothing reads a whole object at once."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.largest = 0

    def read(self, n: int | None = -1) -> bytes:
        out = super().read(n)
        self.largest = max(self.largest, len(out))
        return out


def records(data: bytes, split: SplitType, **kw: int) -> list[bytes]:
    return [r for chunk in read_records(io.BytesIO(data), split, **kw) for r in chunk]


def test_line_split_across_chunk_boundaries_blank_lines_and_crlf() -> None:
    data = b'{"a": 1}\r\n\n   \n{"b": [1, 2, 3]}\n' + b"x" * 50 + b"\nlast-without-newline"
    for chunk in (1, 3, 7, 64, 1 << 20):
        assert records(data, SplitType.LINE, chunk_size=chunk) == [
            b'{"a": 1}',
            b'{"b": [1, 2, 3]}',
            b"x" * 50,
            b"last-without-newline",
        ]


def test_line_split_streams_in_chunks() -> None:
    stream = CountingStream(b"0123456789\n" * 100_000)
    n = sum(len(c) for c in read_records(stream, SplitType.LINE, chunk_size=64 * 1024))
    assert n == 100_000
    assert stream.largest <= 64 * 1024


def test_none_split_is_the_whole_object_and_stops_reading_past_the_limit() -> None:
    assert records(b"a\nb\n", SplitType.NONE) == [b"a\nb\n"]
    assert records(b"", SplitType.NONE) == []
    stream = CountingStream(b"z" * 1000)
    (chunk,) = list(read_records(stream, SplitType.NONE, limit=100))
    assert chunk == [b"z" * 101]  # one byte over: the packer rejects it without reading the rest


def test_recordio_frames_padding_and_multipart_records() -> None:
    magic = struct.pack("<I", 0xCED7230A)
    payloads = [b"abc", b"", b"x" * 8, b"before" + magic + b"middle" + magic + b"after"]
    data = recordio(payloads)
    recs = records(data, SplitType.RECORDIO)
    assert len(recs) == 4 and b"".join(recs) == data  # MultiRecord keeps framing and padding
    framing = FRAMINGS[SplitType.RECORDIO]
    assert [framing.single(r) for r in recs] == payloads  # SingleRecord strips them
    assert len(recs[0]) == 12  # 8-byte header + 3 bytes + 1 byte of padding


def test_tfrecord_frames() -> None:
    payloads = [b"one", b"", b"three" * 100]
    data = tfrecord(payloads)
    recs = records(data, SplitType.TFRECORD)
    assert b"".join(recs) == data
    assert [FRAMINGS[SplitType.TFRECORD].single(r) for r in recs] == payloads


@pytest.mark.parametrize(
    ("split", "data", "message"),
    [
        (SplitType.RECORDIO, recordio([b"abcdef"])[:-3], "truncated RecordIO record"),
        (SplitType.RECORDIO, b"\x00" * 8, "bad RecordIO magic"),
        (SplitType.RECORDIO, recordio([b"a" + struct.pack("<I", 0xCED7230A) + b"b"])[:12], "inside a multi-part"),
        (SplitType.TFRECORD, tfrecord([b"abcdef"])[:-2], "truncated TFRecord record"),
        (SplitType.TFRECORD, b"\x01\x02", "truncated TFRecord header"),
    ],
)
def test_broken_framing_is_an_object_error(split: SplitType, data: bytes, message: str) -> None:
    with pytest.raises(SplitError, match=message):
        records(data, split)


def test_gzip_objects_are_read_decompressed(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl.gz"
    path.write_bytes(gzip.compress(b"[1]\n[2]\n" * 1000))
    obj = InputObject(str(path), "in.jsonl.gz", path.stat().st_size)
    with open_input(obj, Compression.GZIP) as (stream, counter):
        recs = [r for c in read_records(stream, SplitType.LINE) for r in c]
    assert len(recs) == 2000 and recs[:2] == [b"[1]", b"[2]"]
    assert counter.position == obj.size  # progress counts the compressed bytes


# ---- packing --------------------------------------------------------------------------------------------------


def batches(recs: list[bytes], strategy: BatchStrategy, limit: int) -> list[MiniBatch | Rejected]:
    return list(pack([recs], FRAMINGS[SplitType.LINE], strategy, limit))


def test_multirecord_fills_the_payload_exactly() -> None:
    recs = [b"a" * 9] * 10  # 10 bytes each in a request (newline included)
    out = batches(recs, BatchStrategy.MULTI, 100)
    assert len(out) == 1 and isinstance(out[0], MiniBatch) and out[0].size == 100
    assert FRAMINGS[SplitType.LINE].multi(out[0].records) == (b"a" * 9 + b"\n") * 10


def test_one_byte_over_the_payload_starts_a_new_request() -> None:
    out = batches([b"a" * 9] * 10 + [b"b"], BatchStrategy.MULTI, 100)
    assert [(b.first, len(b.records), b.size) for b in out if isinstance(b, MiniBatch)] == [(0, 10, 100), (10, 1, 2)]
    out = batches([b"a" * 9] * 9 + [b"c" * 10], BatchStrategy.MULTI, 100)  # 90 + 11 > 100
    assert [(b.first, len(b.records)) for b in out if isinstance(b, MiniBatch)] == [(0, 9), (9, 1)]


def test_a_record_over_the_limit_is_rejected_in_its_place() -> None:
    out = batches([b"a", b"x" * 200, b"b", b"c"], BatchStrategy.MULTI, 100)
    assert isinstance(out[0], MiniBatch) and out[0].records == [b"a"]
    assert isinstance(out[1], Rejected) and out[1].index == 1 and "201 bytes" in out[1].error
    assert isinstance(out[2], MiniBatch) and (out[2].first, out[2].records) == (2, [b"b", b"c"])
    single = batches([b"a", b"x" * 101, b"y" * 100], BatchStrategy.SINGLE, 100)
    assert [type(b).__name__ for b in single] == ["MiniBatch", "Rejected", "MiniBatch"]
    assert "MaxPayloadInMB" in single[1].error  # type: ignore[union-attr]


def test_single_record_batches_and_the_input_filter() -> None:
    def prepare(rec: bytes) -> bytes:
        if rec == b"bad":
            raise ValueError("does not fit")
        return rec.upper()

    out = list(pack([[b"a", b"bad", b"c"]], FRAMINGS[SplitType.LINE], BatchStrategy.MULTI, MB, prepare, True))
    assert isinstance(out[0], MiniBatch) and out[0].records == [b"A"] and out[0].originals == [b"a"]
    assert isinstance(out[1], Rejected) and out[1].error == "does not fit"
    assert isinstance(out[2], MiniBatch) and out[2].first == 2 and out[2].records == [b"C"]
    single = list(pack([[b"a", b"b"]], FRAMINGS[SplitType.LINE], BatchStrategy.SINGLE, MB))
    assert [(b.first, b.records) for b in single if isinstance(b, MiniBatch)] == [(0, [b"a"]), (1, [b"b"])]


def test_fast_packing_equals_the_record_by_record_packer() -> None:
    import random

    rng = random.Random(3)
    for _ in range(200):
        lists = [[b"x" * rng.randrange(0, 40) for _ in range(rng.randrange(0, 30))] for _ in range(rng.randrange(1, 5))]
        limit = rng.randrange(1, 120)
        plain = list(pack(lists, FRAMINGS[SplitType.LINE], BatchStrategy.MULTI, limit))
        by_record = list(pack(lists, FRAMINGS[SplitType.LINE], BatchStrategy.MULTI, limit, prepare=lambda r: r))
        assert plain == by_record


def test_listing_a_directory_keeps_relative_keys_and_skips_hidden_files(tmp_path: Path) -> None:
    from servekit.services.transform.objects import content_type_of, list_inputs
    from servekit.services.transform.spec import DataType

    for rel in ("b.csv", "a/x.jsonl.gz", ".hidden", ".git/config", "a/.swp"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"1\n")
    assert [(o.key, o.size) for o in list_inputs(str(tmp_path), DataType.PREFIX)] == [("a/x.jsonl.gz", 2), ("b.csv", 2)]
    assert [o.key for o in list_inputs(str(tmp_path / "b.csv"), DataType.PREFIX)] == ["b.csv"]
    assert content_type_of("a/x.jsonl.gz") == "application/jsonlines" and content_type_of("x.bin") == ""
