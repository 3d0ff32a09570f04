"""Jobs' s3:// files from the plane's own store: channels as hard links (no copy per byte), outputs committed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from servekit.services.s3.objects import Objects
from servekit.services.s3.store import ObjectInfo, ObjectStore


def put(store: ObjectStore, bucket: str, key: str, data: bytes) -> None:
    tmp = store.temp_path()
    tmp.write_bytes(data)
    store.commit(tmp, ObjectInfo(bucket, key, len(data), '"x"', 0.0))


@pytest.fixture
def objects(tmp_path: Path) -> Objects:
    store = ObjectStore(tmp_path / "s3")
    store.create_bucket("data")
    put(store, "data", "train/a.csv", b"a")
    put(store, "data", "train/sub/b.csv", b"b")
    put(store, "data", "train-extra.csv", b"c")
    return Objects(store)


def test_a_prefix_is_linked_with_paths_relative_to_it(objects: Objects, tmp_path: Path) -> None:
    dest = tmp_path / "ch"
    assert objects.fetch("s3://data/train/", dest) == 2
    assert (dest / "a.csv").read_bytes() == b"a" and (dest / "sub" / "b.csv").read_bytes() == b"b"
    source = objects.store.path("data", "train/a.csv")
    assert source is not None and os.stat(dest / "a.csv").st_ino == os.stat(source).st_ino  # a link, not a copy


def test_an_object_named_exactly_keeps_its_base_name(objects: Objects, tmp_path: Path) -> None:
    assert objects.fetch("s3://data/train-extra.csv", tmp_path / "one") == 1
    assert (tmp_path / "one" / "train-extra.csv").read_bytes() == b"c"


def test_missing_data_and_hostile_keys(objects: Objects, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        objects.fetch("s3://data/nothing/", tmp_path / "x")
    with pytest.raises(FileNotFoundError):
        objects.fetch("s3://elsewhere/x", tmp_path / "x")  # not the plane's bucket and no external S3
    put(objects.store, "data", "evil/../../../escape", b"e")
    with pytest.raises(ValueError):
        objects.fetch("s3://data/evil/", tmp_path / "y")
    assert not (tmp_path / "escape").exists()


def test_put_file_commits_an_object(objects: Objects, tmp_path: Path) -> None:
    src = tmp_path / "model.tar.gz"
    src.write_bytes(b"model bytes")
    etag = objects.put_file("s3://data/out/job/output/model.tar.gz", src)
    info = objects.store.get("data", "out/job/output/model.tar.gz")
    assert info is not None and info.etag == etag and info.size == 11
