"""A job's inputs and outputs go through the storage API: listing, manifests, reading and the output writer,
here on the in-memory fake (the same code runs on local paths and URIs in the integration tests)."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest

from servekit.services.transform.objects import InputError, InputObject, list_inputs, open_input
from servekit.services.transform.spec import Compression, DataType
from servekit.services.transform.writer import ObjectWriter, RecordError
from servekit.testing import InMemoryStorage


def test_a_prefix_lists_its_files_in_key_order_without_hidden_ones() -> None:
    s = InMemoryStorage()
    s.put("mem://in/b.csv", b"1\n")
    s.put("mem://in/a/x.csv", b"22\n")
    s.put("mem://in/.gitkeep", b"")
    s.put("mem://in/.cache/y.csv", b"")
    objects = list_inputs("mem://in", DataType.PREFIX, s)
    assert objects == [InputObject("mem://in/a/x.csv", "a/x.csv", 3), InputObject("mem://in/b.csv", "b.csv", 2)]
    assert list_inputs("mem://in/b.csv", DataType.PREFIX, s) == [InputObject("mem://in/b.csv", "b.csv", 2)]


def test_missing_and_empty_inputs_say_so() -> None:
    s = InMemoryStorage()
    with pytest.raises(InputError, match="does not exist"):
        list_inputs("mem://nope", DataType.PREFIX, s)
    s.put("mem://only-hidden/.x", b"")
    with pytest.raises(InputError, match="holds no files"):
        list_inputs("mem://only-hidden", DataType.PREFIX, s)


def test_a_manifest_with_a_relative_prefix() -> None:
    s = InMemoryStorage()
    s.put("mem://b/data/one.jsonl", b"{}\n")
    s.put("mem://b/data/sub/two.jsonl", b"{}\n{}\n")
    s.put("mem://b/manifest.json", orjson.dumps([{"prefix": "data"}, "one.jsonl", "sub/two.jsonl"]))
    objects = list_inputs("mem://b/manifest.json", DataType.MANIFEST, s)
    assert objects == [
        InputObject("mem://b/data/one.jsonl", "one.jsonl", 3),
        InputObject("mem://b/data/sub/two.jsonl", "sub/two.jsonl", 6),
    ]
    s.put("mem://b/bad.json", orjson.dumps([{"prefix": "data"}, "missing.jsonl"]))
    with pytest.raises(InputError, match=r"lists mem://b/data/missing\.jsonl, which does not exist"):
        list_inputs("mem://b/bad.json", DataType.MANIFEST, s)


def test_open_input_decompresses_and_counts_raw_bytes() -> None:
    s = InMemoryStorage()
    raw = gzip.compress(b"a\nb\n")
    s.put("mem://in/x.gz", raw)
    with open_input(InputObject("mem://in/x.gz", "x.gz", len(raw)), Compression.GZIP, s) as (stream, counter):
        assert stream.read() == b"a\nb\n"
        assert counter.position == len(raw)


def test_the_writer_publishes_whole_files_only() -> None:
    s = InMemoryStorage()
    w = ObjectWriter("mem://out/a.csv.out", "mem://out/a.csv.out.errors.jsonl", "job", s)
    w.write(b"partial")
    assert not s.exists("mem://out/a.csv.out")  # nothing under the final name until commit
    w.write_errors([RecordError(3, b"bad", "boom")])
    w.commit()
    assert s.get("mem://out/a.csv.out") == b"partial"
    assert orjson.loads(s.get("mem://out/a.csv.out.errors.jsonl")) == {"index": 3, "input": "bad", "error": "boom"}
    assert sorted(s.files) == ["mem://out/a.csv.out", "mem://out/a.csv.out.errors.jsonl"]  # no temporaries left

    again = ObjectWriter("mem://out/a.csv.out", "mem://out/a.csv.out.errors.jsonl", "job", s)
    again.write(b"clean")
    again.commit()  # a clean re-run removes the stale errors file
    assert sorted(s.files) == ["mem://out/a.csv.out"] and s.get("mem://out/a.csv.out") == b"clean"

    aborted = ObjectWriter("mem://out/b.csv.out", "mem://out/b.csv.out.errors.jsonl", "job", s)
    aborted.write(b"x")
    aborted.abort()
    assert sorted(s.files) == ["mem://out/a.csv.out"]


def test_a_symlinked_folder_in_the_input_is_followed(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "b.jsonl").write_bytes(b"[2]\n")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_bytes(b"[1]\n")
    (tmp_path / "in" / "more").symlink_to(tmp_path / "real")
    objects = list_inputs(str(tmp_path / "in"), DataType.PREFIX)
    assert [(o.key, o.size) for o in objects] == [("a.jsonl", 4), ("more/b.jsonl", 4)]


@pytest.mark.parametrize("where", ["inside", "the input itself"])
def test_a_symlink_loop_is_a_one_line_input_error(tmp_path: Path, where: str) -> None:
    if where == "inside":
        (tmp_path / "in").mkdir()
        (tmp_path / "in" / "a.jsonl").write_bytes(b"[1]\n")
        (tmp_path / "in" / "back").symlink_to(tmp_path / "in")
        culprit = tmp_path / "in" / "back"
    else:
        (tmp_path / "in").symlink_to(tmp_path / "other")
        (tmp_path / "other").symlink_to(tmp_path / "in")
        culprit = tmp_path / "in"
    with pytest.raises(InputError) as info:
        list_inputs(str(tmp_path / "in"), DataType.PREFIX)
    message = str(info.value)
    assert message.startswith(f"cannot list the input {tmp_path / 'in'}: symbolic link loop")
    assert message.endswith(f"at {culprit}") and "\n" not in message
