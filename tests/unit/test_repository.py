"""Storage listing, the version lister and the polling source (with config reloads), on real files."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import fsspec
import pytest

from servekit.config.loading import load_model_config_file
from servekit.config.models import ModelConfig
from servekit.repository.layout import VersionLister
from servekit.repository.source import RepositorySource
from servekit.runtime.registry import RuntimeRegistry
from servekit.storage import Storage


class Recorder:
    def __init__(self) -> None:
        self.models: list[list[str]] = []
        self.aspired: dict[str, dict[int, str]] = {}

    def set_models(self, models: Sequence[ModelConfig]) -> None:
        self.models.append([m.name for m in models])

    def set_aspired_versions(self, model: str, versions: Mapping[int, str]) -> None:
        self.aspired[model] = dict(versions)


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
    (tmp_path / "a" / "1").mkdir(parents=True)
    (tmp_path / "b" / "2").mkdir(parents=True)
    cfg = tmp_path / "models.config"
    cfg.write_text("model_config_list { config { name: 'a' base_path: 'a' } }")
    target = Recorder()
    source = RepositorySource(
        Storage(),
        target,
        load_model_config_file(cfg),
        poll_wait=0,
        config_loader=lambda: load_model_config_file(cfg),
        config_poll_wait=0.05,
    )

    async def main() -> None:
        await source.start()
        assert target.models == [["a"]]
        assert list(target.aspired) == ["a"]
        cfg.write_text("model_config_list { config { name: 'b' base_path: 'b' } }")
        for _ in range(200):
            if target.models[-1] == ["b"] and "b" in target.aspired:
                break
            await asyncio.sleep(0.02)
        # A broken config keeps the current models.
        cfg.write_text("model_config_list { config { name: ")
        await asyncio.sleep(0.2)
        await source.stop()

    asyncio.run(main())
    assert target.models == [["a"], ["b"]]
    assert list(target.aspired["b"]) == [2]
