"""Data capture into servekit up's own S3 store: which DestinationS3Uri an instance writes to a staging folder, and
the shipper that puts each finished file of that folder into the store as an object under the same key (hidden
files, still being written, stay), removes it, keeps what could not be put for the next pass, and prunes the
folders left empty."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from servekit.edge.capture_staging import (
    EMPTY_FOLDER_KEEP_S,
    CaptureShipper,
    content_type,
    object_uri,
    staged_destination,
)
from servekit.services.s3.objects import Objects
from servekit.services.s3.store import ObjectStore

PART = "capture/ep/A/2024/05/01/10"
OWN = {"sagemaker-us-east-1-000000000000", "own"}


def own(bucket: str) -> bool:
    return bucket in OWN


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ObjectStore]:
    s = ObjectStore(tmp_path / "s3")
    for bucket in OWN:
        s.create_bucket(bucket)
    yield s
    s.close()


def staged(root: Path, rel: str, body: bytes = b'{"captureData": {}}\n') -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)
    return path


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("s3://own/capture", "file://{root}/own/capture"),
        ("s3://own/capture/", "file://{root}/own/capture"),
        ("s3://own/a/b", "file://{root}/own/a/b"),
        ("s3://own", "file://{root}/own"),
        ("s3://sagemaker-us-east-1-000000000000/x", "file://{root}/sagemaker-us-east-1-000000000000/x"),
        ("s3://elsewhere/capture", "s3://elsewhere/capture"),  # not the plane's: the instance publishes itself
        ("file:///data/capture", "file:///data/capture"),
        ("/data/capture", "/data/capture"),
        ("s3://own/a//b", "s3://own/a//b"),  # no folder stands for an empty segment
        ("s3://own/../b", "s3://own/../b"),
    ],
)
def test_only_the_planes_own_buckets_are_staged(tmp_path: Path, uri: str, expected: str) -> None:
    assert staged_destination(uri, tmp_path, own) == expected.format(root=tmp_path)


def test_a_staged_file_goes_to_the_key_of_its_path_and_hidden_files_go_nowhere(tmp_path: Path) -> None:
    assert object_uri(tmp_path, tmp_path / "own" / PART / "10-00-1-ab.jsonl") == f"s3://own/{PART}/10-00-1-ab.jsonl"
    assert object_uri(tmp_path, tmp_path / "own" / PART / ".10-00-1-ab.jsonl.tmp") is None
    assert object_uri(tmp_path, tmp_path / "stray.jsonl") is None  # no bucket folder
    assert content_type(Path("a.jsonl")) == "application/jsonlines"
    assert content_type(Path("a.parquet")) == "application/vnd.apache.parquet"


def test_finished_files_become_objects_and_leave_the_staging_folder(tmp_path: Path, store: ObjectStore) -> None:
    root = tmp_path / "staging"
    shipper = CaptureShipper(root, own, Objects(store).put_file)
    done = staged(root, f"own/{PART}/00-01-7-aaaa.jsonl", b"one\n")
    other = staged(root, f"own/{PART}/00-02-7-bbbb.parquet", b"PAR1")
    writing = staged(root, f"own/{PART}/.00-03-7-cccc.jsonl.tmp", b"half")
    assert shipper.ship() == 2
    objects = {o.key: o for o in store.objects("own", "capture/")}
    assert set(objects) == {f"{PART}/00-01-7-aaaa.jsonl", f"{PART}/00-02-7-bbbb.parquet"}
    assert objects[f"{PART}/00-01-7-aaaa.jsonl"].etag == '"' + hashlib.md5(b"one\n").hexdigest() + '"'
    assert objects[f"{PART}/00-01-7-aaaa.jsonl"].content_type == "application/jsonlines"
    path = store.path("own", f"{PART}/00-01-7-aaaa.jsonl")
    assert path is not None and path.read_bytes() == b"one\n"
    assert not done.exists() and not other.exists()
    assert writing.exists()  # the writer renames it when whole; then the next pass ships it
    assert shipper.ship() == 0
    writing.rename(writing.with_name("00-03-7-cccc.jsonl"))
    assert shipper.ship() == 1
    assert store.get("own", f"{PART}/00-03-7-cccc.jsonl") is not None


def test_a_file_that_cannot_be_put_stays_for_the_next_pass_and_is_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "staging"
    broken = True
    put: list[str] = []

    def put_file(uri: str, path: Path, content_type: str) -> str:
        if broken:
            raise OSError("No space left on device")
        put.append(uri)
        return '"etag"'

    shipper = CaptureShipper(root, own, put_file)
    kept = staged(root, f"own/{PART}/00-01-7-aaaa.jsonl")
    with caplog.at_level(logging.WARNING, logger="servekit.edge.capture_staging"):
        assert shipper.ship() == 0
        assert shipper.ship() == 0
    assert kept.exists()
    assert [r.getMessage() for r in caplog.records if "could not be put" in r.getMessage()] == [
        f"captured data {kept} could not be put into s3://own/{PART}/00-01-7-aaaa.jsonl (will retry): "
        "No space left on device"
    ]
    broken = False
    assert shipper.ship() == 1
    assert put == [f"s3://own/{PART}/00-01-7-aaaa.jsonl"] and not kept.exists()


def test_folders_empty_and_untouched_for_two_hours_are_removed(tmp_path: Path) -> None:
    root = tmp_path / "staging"
    now = [1_700_000_000.0]
    shipper = CaptureShipper(root, own, lambda uri, path, ct: '"e"', clock=lambda: now[0])
    staged(root, f"own/{PART}/00-01-7-aaaa.jsonl")
    assert shipper.ship() == 1
    hour = root / "own" / PART
    assert hour.is_dir()  # just emptied: the writer may still open its next file there
    old = now[0] - EMPTY_FOLDER_KEEP_S - 1
    for folder in [hour, *hour.parents]:
        if folder == root.parent:
            break
        os.utime(folder, (old, old))
    shipper.ship()
    assert not hour.exists()
    # removing the hour's folder touched its parent: it waits its own two hours (a writer may be making a new hour)
    assert hour.parent.is_dir()
    now[0] = hour.parent.stat().st_mtime + EMPTY_FOLDER_KEEP_S
    shipper.ship()
    assert not hour.parent.exists()
    assert root.is_dir()  # the staging root itself stays


def test_close_ships_what_is_staged(tmp_path: Path, store: ObjectStore) -> None:
    root = tmp_path / "staging"
    shipper = CaptureShipper(root, own, Objects(store).put_file, interval_s=3600.0)

    async def main() -> None:
        shipper.start()
        await asyncio.sleep(0)
        staged(root, f"own/{PART}/00-09-7-dddd.jsonl")  # published by an instance as it stopped
        await shipper.close()

    asyncio.run(main())
    assert store.get("own", f"{PART}/00-09-7-dddd.jsonl") is not None
    assert not list(root.rglob("*.jsonl"))
