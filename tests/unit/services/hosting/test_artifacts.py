"""ModelDataUrl resolution: directories and archives, local and remote; archives unpacked once per digest (threads
included) and safely: each hostile archive is refused with its entry and rule, and nothing lands outside."""

from __future__ import annotations

import dataclasses
import gzip
import importlib
import io
import os
import shutil
import sys
import tarfile
import threading
from pathlib import Path

import pytest

from servekit.services.hosting.artifacts import ArchiveLimits, ArtifactError, ArtifactResolver, ResolvedModel
from servekit.storage import FileInfo
from servekit.testing.memory_storage import InMemoryStorage

SMALL = ArchiveLimits(
    max_total_bytes=4 * 1024**2, max_entries=50, max_file_bytes=2 * 1024**2, max_ratio=20, ratio_floor_bytes=256 * 1024
)


def _tar(path: Path, entries: list[tuple[tarfile.TarInfo, bytes | None]], mode: str = "w:gz") -> Path:
    with tarfile.open(path, mode) as tar:
        for info, data in entries:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str, data: bytes = b"weights") -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def _entry(name: str, kind: bytes, linkname: str = "") -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    if kind == tarfile.DIRTYPE:
        info.mode = 0o755
    return info, None


def _cache_children(cache: Path) -> list[str]:
    archives = cache / "archives"
    if not archives.exists():
        return []
    return sorted(p.name for p in archives.iterdir() if not p.name.endswith(".lock"))


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A folder for archives; the cache is beside it, and ``outside`` is where an escape would land."""
    (tmp_path / "in").mkdir()
    return tmp_path


def _resolver(work: Path, limits: ArchiveLimits = SMALL) -> ArtifactResolver:
    return ArtifactResolver(work / "cache", limits=limits)


# ---- good archives -----------------------------------------------------------------------------------------------


def test_one_versions_files_become_version_1(work: Path) -> None:
    archive = _tar(work / "in" / "model.tar.gz", [_file("model.onnx"), _file("code/inference.py", b"def model_fn")])
    resolved = _resolver(work).resolve(str(archive))
    assert resolved.unpacked and len(resolved.digest) == 64
    assert resolved.base_path == work / "cache" / "archives" / resolved.digest
    assert (resolved.base_path / "1" / "model.onnx").read_bytes() == b"weights"
    assert (resolved.base_path / "1" / "code" / "inference.py").read_bytes() == b"def model_fn"


def test_integer_folders_are_kept_as_versions(work: Path) -> None:
    archive = _tar(
        work / "in" / "model.tar.gz",
        [_entry("./", tarfile.DIRTYPE), _file("./1/model.onnx", b"v1"), _file("./2/model.onnx", b"v2")],
    )
    base = _resolver(work).resolve(f"file://{archive}").base_path
    assert sorted(p.name for p in base.iterdir()) == ["1", "2"]
    assert (base / "2" / "model.onnx").read_bytes() == b"v2"


def test_plain_tar_and_links_inside_are_fine(work: Path) -> None:
    archive = _tar(
        work / "in" / "model.tar",
        [
            _file("1/model.onnx", b"w"),
            _entry("1/latest.onnx", tarfile.SYMTYPE, "model.onnx"),
            _entry("1/copy.onnx", tarfile.LNKTYPE, "1/model.onnx"),
            _entry("1/here", tarfile.SYMTYPE, "."),
        ],
        mode="w",
    )
    base = _resolver(work).resolve(str(archive)).base_path
    assert (base / "1" / "latest.onnx").read_bytes() == b"w"
    assert (base / "1" / "copy.onnx").read_bytes() == b"w"


def test_a_second_resolve_reuses_the_unpacked_archive(work: Path) -> None:
    archive = _tar(work / "in" / "model.tar.gz", [_file("model.onnx")])
    first = _resolver(work).resolve(str(archive))
    stamp = (first.base_path / "1" / "model.onnx").stat().st_mtime_ns
    copy = work / "in" / "same-bytes.tar.gz"
    shutil.copy(archive, copy)
    second = _resolver(work).resolve(str(copy))  # another resolver, another path, the same digest
    assert second == ResolvedModel(first.base_path, first.digest, False)
    assert (second.base_path / "1" / "model.onnx").stat().st_mtime_ns == stamp
    assert _cache_children(work / "cache") == [first.digest]


def test_concurrent_resolvers_unpack_once(work: Path) -> None:
    archive = _tar(work / "in" / "model.tar.gz", [_file(f"1/part-{i}", os.urandom(20_000)) for i in range(30)])
    barrier = threading.Barrier(8)
    results: list[ResolvedModel] = []
    lock = threading.Lock()

    def resolve() -> None:
        resolver = _resolver(work)  # one each, as separate processes would have
        barrier.wait()
        got = resolver.resolve(str(archive))
        with lock:
            results.append(got)

    threads = [threading.Thread(target=resolve) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8
    assert sum(r.unpacked for r in results) == 1
    assert {r.base_path for r in results} == {results[0].base_path}
    assert len(list((results[0].base_path / "1").iterdir())) == 30
    assert _cache_children(work / "cache") == [results[0].digest]  # no temporary directory left behind


# ---- hostile archives --------------------------------------------------------------------------------------------

HOSTILE: dict[str, tuple[list[tuple[tarfile.TarInfo, bytes | None]], str]] = {
    "traversal": ([_file("model.onnx"), _file("../outside/evil.txt")], r"'\.\./outside/evil\.txt'.*'\.\.' in its path"),
    "deep traversal": ([_file("1/../../outside/evil.txt")], r"'\.\.' in its path"),
    "absolute": ([_file("/outside/evil.txt")], r"'/outside/evil\.txt'.*absolute path"),
    "symlink out": (
        [_entry("1/out", tarfile.SYMTYPE, "../../outside"), _file("1/model.onnx")],
        r"'1/out'.*symbolic link to '\.\./\.\./outside' points outside",
    ),
    "absolute symlink": ([_entry("1/out", tarfile.SYMTYPE, "/etc")], r"'1/out'.*symbolic link to the absolute path"),
    "write through a symlink": (
        [_entry("1", tarfile.SYMTYPE, "sub"), _file("1/evil.txt")],
        r"'1/evil\.txt'.*goes through the symbolic link '1'",
    ),
    "symlink chain out": (
        [_entry("a", tarfile.SYMTYPE, "."), _entry("b", tarfile.SYMTYPE, "a/.."), _file("model.onnx")],
        r"'b'.*passes through the symbolic link 'a'",
    ),
    "hardlink out": ([_entry("1/passwd", tarfile.LNKTYPE, "/etc/passwd")], r"'1/passwd'.*hard link to '/etc/passwd'"),
    "hardlink up": ([_entry("1/x", tarfile.LNKTYPE, "../outside/x")], r"'1/x'.*'\.\.' in its path|'1/x'.*hard link"),
    "hardlink to a later file": (
        [_entry("1/x", tarfile.LNKTYPE, "1/y"), _file("1/y")],
        r"'1/x'.*not a regular file earlier in the archive",
    ),
    "fifo": ([_file("model.onnx"), _entry("1/pipe", tarfile.FIFOTYPE)], r"'1/pipe'.*it is a FIFO"),
    "device": ([_entry("1/null", tarfile.CHRTYPE)], r"'1/null'.*it is a device file"),
    "duplicate": ([_file("model.onnx"), _file("model.onnx", b"again")], r"'model\.onnx'.*appears twice"),
    "too many entries": ([_file(f"f{i}") for i in range(51)], r"'f50'.*more than 50 entries"),
    "a file over the limit": ([_file("big", b"\0" * (2 * 1024**2 + 1))], r"'big'.*over the single-file limit"),
    "total over the limit": (
        [_file(f"part{i}", os.urandom(1024**2)) for i in range(5)],
        r"'part4'.*unpacks to more than 4194304 bytes",
    ),
    "compression ratio": ([_file("zeros", b"\0" * (1024**2 + 1))], r"'zeros'.*20 times its compressed size"),
    "no files": ([_entry("1", tarfile.DIRTYPE)], r"holds no files"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_archive_is_refused_and_writes_nothing(work: Path, case: str) -> None:
    entries, message = HOSTILE[case]
    archive = _tar(work / "in" / "model.tar.gz", entries)
    with pytest.raises(ArtifactError, match=message) as caught:
        _resolver(work).resolve(str(archive))
    assert caught.value.message.startswith(f"model archive {archive}: ")
    assert not (work / "outside").exists()
    assert _cache_children(work / "cache") == []  # neither the digest's folder nor a temporary one
    assert sorted(p.name for p in work.iterdir()) == ["cache", "in"]


def test_a_huge_declared_size_is_refused_before_any_data_is_read(work: Path) -> None:
    info = tarfile.TarInfo("1/huge.bin")
    info.size = 10**12  # a header that promises a terabyte, followed by nothing
    (work / "in" / "model.tar").write_bytes(info.tobuf(format=tarfile.GNU_FORMAT))
    with pytest.raises(ArtifactError, match=r"'1/huge\.bin'.*1000000000000 bytes is over the single-file limit"):
        _resolver(work).resolve(str(work / "in" / "model.tar"))


def _sparse_entry(name: str, size: int) -> bytes:
    """The header ``tar --sparse`` (GNU format) writes for a file of ``size`` bytes that is all holes: type 'S', its
    map's one region at ``size`` holding 0 bytes, the real size beside it, no data stored. tarfile writes no sparse
    entry, so the fields are set here, as GNU tar 1.34 sets them."""
    info = tarfile.TarInfo(name)
    info.type = tarfile.GNUTYPE_SPARSE
    header = bytearray(info.tobuf(format=tarfile.GNU_FORMAT))
    header[386:398] = tarfile.itn(size, 12, tarfile.GNU_FORMAT)  # the region's offset
    header[398:410] = tarfile.itn(0, 12, tarfile.GNU_FORMAT)  # and length
    header[483:495] = tarfile.itn(size, 12, tarfile.GNU_FORMAT)  # the file's real size
    header[148:155] = b"%06o\0" % tarfile.calc_chksums(bytes(header))[0]
    return bytes(header)


def test_a_sparse_file_counts_at_its_full_size(work: Path) -> None:
    archive = work / "in" / "model.tar.gz"
    archive.write_bytes(gzip.compress(_sparse_entry("holes.bin", 3 * 1024**2) + bytes(1024)))  # 3 MiB of holes
    with tarfile.open(archive) as tar:
        [member] = tar.getmembers()
        assert member.issparse() and member.size == 3 * 1024**2  # what the resolver must count
    assert archive.stat().st_size < 64 * 1024
    limits = dataclasses.replace(SMALL, max_ratio=10**6)
    with pytest.raises(ArtifactError, match=r"'holes\.bin'.*over the single-file limit"):
        _resolver(work, limits).resolve(str(archive))


def test_garbage_is_not_a_tar_archive(work: Path) -> None:
    (work / "in" / "model.tar.gz").write_bytes(b"\x1f\x8b" + os.urandom(200))
    with pytest.raises(ArtifactError, match="not a readable tar archive"):
        _resolver(work).resolve(str(work / "in" / "model.tar.gz"))
    (work / "in" / "model.tar").write_bytes(b"just some text, not a tar header" * 40)
    with pytest.raises(ArtifactError, match="not a readable tar archive"):
        _resolver(work).resolve(str(work / "in" / "model.tar"))
    assert _cache_children(work / "cache") == []


def test_the_default_limits_admit_an_ordinary_model(work: Path) -> None:
    archive = _tar(work / "in" / "model.tar.gz", [_file("model.onnx", os.urandom(300_000))])
    assert ArtifactResolver(work / "cache").resolve(str(archive)).unpacked


# ---- directories -------------------------------------------------------------------------------------------------


def test_a_model_base_directory_is_used_as_it_is(work: Path) -> None:
    base = work / "in" / "iris"
    (base / "1").mkdir(parents=True)
    (base / "1" / "model.onnx").write_bytes(b"w")
    (base / ".DS_Store").write_bytes(b"")  # hidden entries do not count
    resolved = _resolver(work).resolve(str(base))
    assert resolved == ResolvedModel(base.resolve(), "", False)
    assert not (work / "cache").exists()


def test_a_plain_directory_is_linked_as_version_1(work: Path) -> None:
    plain = work / "in" / "plain"
    plain.mkdir()
    (plain / "model.joblib").write_bytes(b"m")
    (plain / "1").mkdir()  # a number beside files: still one version's files
    first = _resolver(work).resolve(f"file://{plain}")
    assert (first.base_path / "1").is_symlink()
    assert (first.base_path / "1" / "model.joblib").read_bytes() == b"m"
    again = _resolver(work).resolve(str(plain))
    assert again == first


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "ModelDataUrl is empty"),
        ("/definitely/not/here", "no such file or directory"),
        ("file://relative/path", "needs an absolute path"),
    ],
)
def test_bad_local_urls(work: Path, url: str, message: str) -> None:
    with pytest.raises(ArtifactError, match=message):
        _resolver(work).resolve(url)


def test_an_empty_directory_is_refused(work: Path) -> None:
    (work / "in" / "empty").mkdir()
    with pytest.raises(ArtifactError, match="the directory is empty"):
        _resolver(work).resolve(str(work / "in" / "empty"))


# ---- remote (through the storage API) ----------------------------------------------------------------------------


class StampedStorage(InMemoryStorage):
    """An object store that reports ETags (the in-memory fake reports none) and counts downloads."""

    def __init__(self) -> None:
        super().__init__()
        self.opened: list[str] = []

    def info(self, uri: str) -> FileInfo:
        found = super().info(uri)
        return dataclasses.replace(found, stamp=f"etag-{hash(self.files.get(uri, b''))}")

    def open(self, uri: str, mode: str = "rb", *, compression: str | None = None) -> io.BufferedIOBase:  # type: ignore[override]
        self.opened.append(uri)
        return super().open(uri, mode, compression=compression)  # type: ignore[return-value]


def test_a_remote_archive_is_downloaded_unpacked_and_remembered(work: Path) -> None:
    archive = _tar(work / "in" / "model.tar.gz", [_file("model.onnx", b"remote")])
    storage = StampedStorage()
    storage.put("s3://bucket/models/model.tar.gz", archive.read_bytes())
    resolver = ArtifactResolver(work / "cache", storage=storage, limits=SMALL)
    first = resolver.resolve("s3://bucket/models/model.tar.gz")
    assert first.unpacked and (first.base_path / "1" / "model.onnx").read_bytes() == b"remote"
    second = resolver.resolve("s3://bucket/models/model.tar.gz")
    assert second == ResolvedModel(first.base_path, first.digest, False)
    assert storage.opened == ["s3://bucket/models/model.tar.gz"]  # the unchanged object was not downloaded again
    assert list((work / "cache" / "downloads").iterdir()) == []


def test_a_hostile_remote_archive_is_refused(work: Path) -> None:
    storage = InMemoryStorage()
    archive = _tar(work / "in" / "model.tar.gz", [_file("../outside/x")])
    storage.put("s3://bucket/model.tar.gz", archive.read_bytes())
    with pytest.raises(ArtifactError, match=r"model archive s3://bucket/model\.tar\.gz: entry '\.\./outside/x'"):
        ArtifactResolver(work / "cache", storage=storage, limits=SMALL).resolve("s3://bucket/model.tar.gz")
    assert not (work / "outside").exists()


def test_a_remote_directory_is_downloaded_once(work: Path) -> None:
    storage = InMemoryStorage()
    storage.put("s3://bucket/m/model.onnx", b"r")
    storage.put("s3://bucket/m/code/inference.py", b"i")
    resolver = ArtifactResolver(work / "cache", storage=storage)
    first = resolver.resolve("s3://bucket/m")
    assert first.unpacked and (first.base_path / "1" / "code" / "inference.py").read_bytes() == b"i"
    assert resolver.resolve("s3://bucket/m/") == ResolvedModel(first.base_path, "", False)
    storage.put("s3://bucket/versions/3/model.onnx", b"v3")
    assert (resolver.resolve("s3://bucket/versions").base_path / "3" / "model.onnx").read_bytes() == b"v3"


def test_a_missing_remote_object(work: Path) -> None:
    with pytest.raises(ArtifactError, match="no such object"):
        ArtifactResolver(work / "cache", storage=InMemoryStorage()).resolve("s3://bucket/nothing.tar.gz")


def test_s3_without_s3fs_says_what_to_install(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    registry = importlib.import_module("fsspec.registry")  # the module (fsspec.registry is also a mapping)
    # s3fs is a dependency: hide it (a None in sys.modules makes its import fail, as where it was removed) and
    # drop fsspec's cached s3 class, so the test runs everywhere instead of skipping where the extra is installed
    monkeypatch.setitem(sys.modules, "s3fs", None)
    monkeypatch.delitem(registry._registry, "s3", raising=False)
    with pytest.raises(ArtifactError, match=r"install the matching fsspec package \(s3fs"):
        ArtifactResolver(work / "cache").resolve("s3://bucket/model.tar.gz")
