"""Storage listing, the version lister and the polling source (with config reloads), on real files."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path

import fsspec
import pytest

from servekit.config.loading import load_model_config_file
from servekit.config.models import ModelConfig, VersionPolicy
from servekit.serving.repository.layout import VersionLister
from servekit.serving.repository.source import RepositorySource, fingerprint
from servekit.serving.runtime.registry import RuntimeRegistry
from servekit.storage import Storage
from servekit.testing.clock import run_virtual


class Recorder:
    """The source's target; records what it is told and wakes a waiting test on each call (on the loop)."""

    def __init__(self) -> None:
        self.models: list[list[str]] = []
        self.aspired: dict[str, dict[int, str]] = {}
        self.fingerprints: dict[str, dict[int, str]] = {}
        self.loaded: dict[str, set[int]] = {}
        self.changed = asyncio.Event()

    def set_models(self, models: Sequence[ModelConfig]) -> None:
        self.models.append([m.name for m in models])
        self.changed.set()

    def set_aspired_versions(
        self, model: str, versions: Mapping[int, str], fingerprints: Mapping[int, str] | None = None
    ) -> None:
        self.aspired[model] = dict(versions)
        self.fingerprints[model] = dict(fingerprints or {})
        self.changed.set()

    def loaded_versions(self, model: str) -> Collection[int]:
        return self.loaded.get(model, set())


async def until(seen: Callable[[], bool], changed: asyncio.Event) -> None:
    """Wait, without a timer (the loop runs on virtual time), until ``seen()`` holds; ``changed`` is set by
    whatever might have made it hold."""
    while not seen():
        changed.clear()
        await changed.wait()


def test_non_integer_dirs_ignored_with_one_log_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    for name in ("1", "2", "tmp", "3a", "assets"):
        (tmp_path / name).mkdir()
    (tmp_path / "5").write_text("a file, not a directory")
    lister = VersionLister(Storage())
    with caplog.at_level(logging.INFO):
        assert sorted(lister.versions(str(tmp_path))) == [1, 2]
        lister.versions(str(tmp_path))
    ignored = [r.getMessage() for r in caplog.records if "ignoring" in r.getMessage()]
    assert len(ignored) == 3  # once per name, not once per poll
    assert any("3a" in m for m in ignored)


def test_missing_base_path_has_no_versions(tmp_path: Path) -> None:
    assert VersionLister(Storage()).versions(str(tmp_path / "nope")) == {}


def test_file_uri(tmp_path: Path) -> None:
    (tmp_path / "7").mkdir()
    assert list(VersionLister(Storage()).versions(f"file://{tmp_path}")) == [7]


def test_remote_uri_is_materialised_for_the_runtime(tmp_path: Path) -> None:
    """Any fsspec filesystem works; memory:// stands in for s3:// here."""
    fs = fsspec.filesystem("memory")
    code = b"def model_fn(d):\n    return 3\ndef predict_fn(x, m):\n    return x * m\n"
    fs.pipe("/repo/m/4/code/inference.py", code)
    storage = Storage(cache_dir=str(tmp_path / "cache"))
    versions = VersionLister(storage).versions("memory://repo/m")
    assert list(versions) == [4]
    local = storage.local_path(versions[4])
    assert (local / "code" / "inference.py").read_bytes() == code
    servable = RuntimeRegistry().load(local)
    assert servable.platform == "python_handler"


def test_unknown_scheme_says_what_to_install() -> None:
    from servekit.errors import ConfigError

    with pytest.raises(ConfigError, match="install the matching fsspec package"):
        Storage().list_dirs("nosuchscheme://bucket/models")


def test_config_file_reload(tmp_path: Path) -> None:
    """The config file is re-read every ``config_poll_wait`` seconds of the loop's (virtual) clock: a new model
    set replaces the old one, and a broken file, though read, keeps the current models."""
    (tmp_path / "a" / "1").mkdir(parents=True)
    (tmp_path / "b" / "2").mkdir(parents=True)
    cfg = tmp_path / "models.config"
    cfg.write_text("model_config_list { config { name: 'a' base_path: 'a' } }")
    target = Recorder()
    reads: list[float] = []  # the loop time of each re-read

    async def main() -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()

        def read_config() -> Sequence[ModelConfig]:  # runs on a worker thread
            try:
                return load_model_config_file(cfg)
            finally:
                loop.call_soon_threadsafe(reads.append, loop.time())
                loop.call_soon_threadsafe(target.changed.set)

        source = RepositorySource(
            Storage(),
            target,
            load_model_config_file(cfg),
            poll_wait=0,
            config_loader=read_config,
            config_poll_wait=60,
        )
        await source.start()
        assert target.models == [["a"]]
        assert list(target.aspired) == ["a"]
        assert reads == []  # read once at start (by the caller); the first re-read is one period away
        cfg.write_text("model_config_list { config { name: 'b' base_path: 'b' } }")
        await until(lambda: target.models[-1] == ["b"] and "b" in target.aspired, target.changed)
        assert target.models == [["a"], ["b"]]
        assert list(target.aspired["b"]) == [2]
        # A broken config keeps the current models. Two further reads: the first one's outcome was applied
        # before the second began (one task reads, applies, then waits a period).
        cfg.write_text("model_config_list { config { name: ")
        seen = len(reads)
        await until(lambda: len(reads) >= seen + 2, target.changed)
        await source.stop()
        assert target.models == [["a"], ["b"]]
        assert list(target.aspired["b"]) == [2]
        assert reads[0] - start == pytest.approx(60)
        assert [b - a for a, b in itertools.pairwise(reads)] == pytest.approx([60] * (len(reads) - 1))

    run_virtual(main)


def test_fingerprint_changes_with_the_files_and_only_then(tmp_path: Path) -> None:
    """Names, sizes and change stamps (mtime, ctime, mode): a rewrite of the same size and a chmod count, as
    does a directory that could not be listed becoming listable; an untouched directory keeps its print."""
    storage = Storage()
    d = tmp_path / "3"
    (d / "sub").mkdir(parents=True)
    model = d / "sub" / "model.bin"
    model.write_bytes(b"corrupt!")
    first = fingerprint(storage, str(d))
    assert fingerprint(storage, str(d)) == first  # nothing changed: same print, no retry
    seen = {first}
    model.write_bytes(b"fixed ok")  # same size, new content
    os.utime(model, ns=(1_000_000_000, 1_000_000_000))  # even with an mtime set back, ctime moved
    seen.add(fingerprint(storage, str(d)))
    model.chmod(0o600)
    seen.add(fingerprint(storage, str(d)))
    (d / "extra.txt").write_text("")
    seen.add(fingerprint(storage, str(d)))
    assert len(seen) == 4
    gone = fingerprint(storage, str(tmp_path / "missing"))
    assert gone == fingerprint(storage, str(tmp_path / "missing")) and gone not in seen


def test_source_fingerprints_only_versions_not_loaded(tmp_path: Path) -> None:
    for v in (1, 2):
        (tmp_path / "m" / str(v)).mkdir(parents=True)
        (tmp_path / "m" / str(v) / "f").write_text(str(v))
    target = Recorder()
    target.loaded["m"] = {1}
    source = RepositorySource(
        Storage(), target, [ModelConfig("m", str(tmp_path / "m"), version_policy=VersionPolicy("all"))], poll_wait=0
    )

    async def main() -> None:
        source.poll_once()
        assert sorted(target.aspired["m"]) == [1, 2]
        assert list(target.fingerprints["m"]) == [2]  # 1 serves already: its files are not read again
        before = target.fingerprints["m"][2]
        await source.poll()
        assert target.fingerprints["m"][2] == before
        (tmp_path / "m" / "2" / "f").write_text("22")
        await source.poll()
        assert target.fingerprints["m"][2] != before

    asyncio.run(main())


def test_a_remote_version_changed_in_place_is_copied_again(tmp_path: Path) -> None:
    """A failed remote version retried after a fix must not load the broken local copy made before."""
    fs = fsspec.filesystem("memory")
    fs.pipe("/fixrepo/m/1/fake.txt", b"corrupt")
    storage = Storage(cache_dir=str(tmp_path / "cache"))
    first = storage.local_path("memory://fixrepo/m/1")
    assert (first / "fake.txt").read_bytes() == b"corrupt"
    assert storage.local_path("memory://fixrepo/m/1") == first  # unchanged: the copy is reused
    fs.pipe("/fixrepo/m/1/fake.txt", b"7")
    assert (storage.local_path("memory://fixrepo/m/1") / "fake.txt").read_bytes() == b"7"
    fs.rm("/fixrepo", recursive=True)
