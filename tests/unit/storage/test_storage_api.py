"""One suite over every implementation of the storage API: local paths, file:// URIs, memory:// through fsspec,
and the InMemoryStorage fake. What passes here for one must pass for all."""

from __future__ import annotations

import gzip
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import fsspec
import pytest

from servekit.errors import ConfigError
from servekit.storage import FileInfo, ObjectStorage, Storage, join
from servekit.testing import InMemoryStorage


@dataclass
class Backend:
    storage: ObjectStorage
    root: str


@pytest.fixture(params=["local", "file-uri", "fsspec-memory", "in-memory"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    kind = request.param
    if kind == "local":
        yield Backend(Storage(), str(tmp_path / "root"))
    elif kind == "file-uri":
        yield Backend(Storage(), f"file://{tmp_path}/root")
    elif kind == "fsspec-memory":
        name = f"servekit-test-{uuid.uuid4().hex}"
        yield Backend(Storage(), f"memory://{name}/root")
        fs = fsspec.filesystem("memory")
        if fs.exists(f"/{name}"):
            fs.rm(f"/{name}", recursive=True)  # fsspec's memory filesystem is global to the process
    else:
        yield Backend(InMemoryStorage(), "mem://bucket/root")


def test_both_implementations_satisfy_the_protocol() -> None:
    assert isinstance(Storage(), ObjectStorage)
    assert isinstance(InMemoryStorage(), ObjectStorage)


def test_put_get_info_exists(backend: Backend) -> None:
    s, uri = backend.storage, join(backend.root, "a", "b.bin")
    assert not s.exists(uri)
    s.put(uri, b"hello")
    assert s.exists(uri) and not s.isdir(uri)
    assert s.get(uri) == b"hello"
    assert s.info(uri) == FileInfo(uri, "b.bin", 5, False)
    assert s.isdir(join(backend.root, "a")) and s.isdir(backend.root)
    s.put(uri, b"second")  # replaces the whole content
    assert s.get(uri) == b"second"


def test_put_leaves_no_temporary_file(backend: Backend) -> None:
    s = backend.storage
    s.put(join(backend.root, "x.json"), b"{}")
    s.put(join(backend.root, "x.json"), b"[]")
    assert [e.key for e in s.list(backend.root)] == ["x.json"]


def test_missing_files_raise_file_not_found(backend: Backend) -> None:
    s, missing = backend.storage, join(backend.root, "nope.txt")
    for call in (s.get, s.info, s.list, s.remove, lambda u: s.open(u, "rb")):
        with pytest.raises(FileNotFoundError):
            call(missing)
    assert s.list_dirs(missing) == []


def test_open_write_creates_parents_and_append_appends(backend: Backend) -> None:
    s, uri = backend.storage, join(backend.root, "deep", "er", "log.jsonl")
    with s.open(uri, "wb") as f:
        f.write(b"one\n")
    with s.open(uri, "ab") as f:
        f.write(b"two\n")
    with s.open(uri, "rb") as f:
        assert f.read() == b"one\ntwo\n"
    with pytest.raises(ValueError, match="binary modes"):
        s.open(uri, "r")


def test_gzip_round_trip(backend: Backend) -> None:
    s, uri = backend.storage, join(backend.root, "data.csv.gz")
    with s.open(uri, "wb", compression="gzip") as f:
        f.write(b"a,b\n1,2\n")
    assert gzip.decompress(s.get(uri)) == b"a,b\n1,2\n"  # compressed at rest
    with s.open(uri, "rb", compression="gzip") as f:
        assert f.read() == b"a,b\n1,2\n"


def test_list_one_level_and_recursive(backend: Backend) -> None:
    s, root = backend.storage, backend.root
    s.put(join(root, "b.txt"), b"bb")
    s.put(join(root, "a", "x.txt"), b"x")
    s.put(join(root, "a", "deeper", "y.txt"), b"yyy")
    s.put(join(root, ".hidden"), b"")
    top = s.list(root)
    assert [(e.key, e.is_dir) for e in top] == [(".hidden", False), ("a", True), ("b.txt", False)]
    assert top[2] == FileInfo(join(root, "b.txt"), "b.txt", 2, False)
    deep = s.list(root, recursive=True)
    assert [(e.key, e.size) for e in deep] == [(".hidden", 0), ("a/deeper/y.txt", 3), ("a/x.txt", 1), ("b.txt", 2)]
    for e in deep:  # every listed address opens, in the caller's spelling
        assert e.uri == join(root, e.key) and s.get(e.uri) == s.get(join(root, *e.key.split("/")))
    assert s.list_dirs(root) == ["a"]
    assert s.list(join(root, "b.txt")) == [FileInfo(join(root, "b.txt"), "b.txt", 2, False)]  # a file lists itself


def test_makedirs_then_an_empty_folder(backend: Backend) -> None:
    s, folder = backend.storage, join(backend.root, "empty")
    s.makedirs(folder)
    s.makedirs(folder)  # nothing to do the second time
    assert s.isdir(folder) and s.exists(folder)
    assert s.list(folder) == [] and s.list(folder, recursive=True) == []
    assert s.list_dirs(backend.root) == ["empty"]


def test_rename_publishes_and_replaces(backend: Backend) -> None:
    s, tmp, final = backend.storage, join(backend.root, ".out.tmp"), join(backend.root, "out")
    s.put(final, b"old")
    with s.open(tmp, "wb") as f:
        f.write(b"new")
    s.rename(tmp, final)
    assert s.get(final) == b"new" and not s.exists(tmp)
    s.remove(final)
    assert not s.exists(final)


def test_put_file_uploads_a_local_file(backend: Backend, tmp_path: Path) -> None:
    local = tmp_path / "staging.jsonl"
    local.write_bytes(b'{"a": 1}\n')
    target = join(backend.root, "2024", "01", "part.jsonl")
    backend.storage.put_file(local, target)
    assert backend.storage.get(target) == b'{"a": 1}\n' and local.exists()


def test_join() -> None:
    assert join("/a/b/", "c", "d/e") == "/a/b/c/d/e"
    assert join("s3://bucket", "k") == "s3://bucket/k"
    assert join("/", "x") == "/x"
    assert join("rel", "", "x/") == "rel/x"
    assert join("s3://bucket/") == "s3://bucket"


def test_unknown_scheme_says_what_to_install() -> None:
    with pytest.raises(ConfigError, match="install the matching fsspec package"):
        Storage().get("nosuchscheme://bucket/x")


def test_in_memory_writes_show_when_closed() -> None:
    s = InMemoryStorage()
    f = s.open("mem://b/x", "wb")
    f.write(b"partial")
    assert not s.exists("mem://b/x")
    f.close()
    assert s.files == {"mem://b/x": b"partial"}


def test_in_memory_local_path_materialises_a_folder(tmp_path: Path) -> None:
    s = InMemoryStorage(cache_dir=str(tmp_path))
    s.put("mem://repo/m/1/code/inference.py", b"print(1)\n")
    local = s.local_path("mem://repo/m/1")
    assert (local / "code" / "inference.py").read_bytes() == b"print(1)\n"


# ---- local symbolic links (only local disks have them) ------------------------------------------------------


@pytest.mark.parametrize("spelling", ["plain", "file-uri"])
def test_local_listings_follow_links_to_folders(tmp_path: Path, spelling: str) -> None:
    (tmp_path / "elsewhere" / "deep").mkdir(parents=True)
    (tmp_path / "elsewhere" / "deep" / "b.txt").write_bytes(b"bb")
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "a.txt").write_bytes(b"a")
    (tmp_path / "root" / "linked").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "root" / "alias.txt").symlink_to(tmp_path / "root" / "a.txt")
    root = str(tmp_path / "root") if spelling == "plain" else f"file://{tmp_path}/root"
    storage = Storage()
    files = storage.list(root, recursive=True)
    assert [(e.key, e.size, e.is_dir) for e in files] == [
        ("a.txt", 1, False),
        ("alias.txt", 1, False),
        ("linked/deep/b.txt", 2, False),
    ]
    assert storage.get(files[-1].uri) == b"bb"
    top = {e.key: e.is_dir for e in storage.list(root)}
    assert top == {"a.txt": False, "alias.txt": False, "linked": True}
    assert storage.list_dirs(root) == ["linked"]  # a version directory may be a link (TF Serving follows them)


def test_a_link_loop_fails_a_local_listing_naming_the_link(tmp_path: Path) -> None:
    storage = Storage()
    (tmp_path / "cycle" / "sub").mkdir(parents=True)
    (tmp_path / "cycle" / "sub" / "up").symlink_to(tmp_path / "cycle")
    with pytest.raises(OSError, match=r"symbolic link loop \(leads back to .*cycle\)") as info:
        storage.list(str(tmp_path / "cycle"), recursive=True)
    assert info.value.filename == str(tmp_path / "cycle" / "sub" / "up")
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "x").symlink_to(tmp_path / "self" / "x")
    with pytest.raises(OSError, match="symbolic link loop") as info:
        storage.list(str(tmp_path / "self"), recursive=True)
    assert info.value.filename == str(tmp_path / "self" / "x")
    # Two links to one folder are not a loop: both are listed.
    (tmp_path / "twice" / "shared").mkdir(parents=True)
    (tmp_path / "twice" / "shared" / "f").write_text("")
    (tmp_path / "twice" / "again").symlink_to(tmp_path / "twice" / "shared")
    assert [e.key for e in storage.list(str(tmp_path / "twice"), recursive=True)] == ["again/f", "shared/f"]
