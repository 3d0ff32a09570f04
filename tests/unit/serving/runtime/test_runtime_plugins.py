"""Runtime plugins: the built-ins come from the registry itself, third-party runtimes from the
``servekit.runtimes`` entry-point group; ``servekit.testing.FakeRuntime`` is such a plugin."""

from __future__ import annotations

import logging
import tomllib
from pathlib import Path

import numpy as np
import pytest

from servekit.config.models import RuntimeOptions
from servekit.errors import ConfigError
from servekit.serving.runtime.manifest import Manifest
from servekit.serving.runtime.onnx import OnnxRuntime
from servekit.serving.runtime.registry import RuntimeRegistry
from servekit.testing import FakeRuntime, FakeServable, write_fake_version

ROOT = Path(__file__).resolve().parents[4]
BUILTIN = {"python", "onnx", "sklearn"}


def install_plugin(site: Path, monkeypatch: pytest.MonkeyPatch, entry_points: str) -> None:
    """A third-party distribution, as pip would leave it: a ``.dist-info`` with entry points, on ``sys.path``."""
    info = site / "servekit_test_plugin-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: servekit-test-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(entry_points)
    monkeypatch.syspath_prepend(str(site))


def test_fake_runtime_loads_a_fake_servable_from_a_version_dir(tmp_path: Path) -> None:
    runtime = FakeRuntime()
    good = write_fake_version(tmp_path, 1, "2.5")
    assert runtime.can_load(good) and not runtime.can_load(tmp_path / "missing")
    servable = runtime.load(good, Manifest(), RuntimeOptions())
    assert isinstance(servable, FakeServable)
    out = servable.predict("serving_default", {"x": np.zeros((2, 2), np.float32)})
    np.testing.assert_array_equal(out["y"], np.full((2, 2), 2.5, np.float32))
    with pytest.raises(ValueError, match="corrupt model file"):
        runtime.load(write_fake_version(tmp_path, 2, "corrupt"), Manifest(), RuntimeOptions())
    failing = runtime.load(write_fake_version(tmp_path, 3, "raise"), Manifest(), RuntimeOptions())
    with pytest.raises(RuntimeError, match="fake model failure"):
        failing.predict("serving_default", {"x": np.zeros((1, 2), np.float32)})
    assert runtime.loaded == [good, tmp_path / "3"]


def test_a_registry_given_the_fake_runtime_detects_and_loads_fake_versions(tmp_path: Path) -> None:
    registry = RuntimeRegistry((FakeRuntime(),))
    assert registry.names == ["fake"]
    assert registry.load(write_fake_version(tmp_path, 1), platform="").platform == "fake"
    with pytest.raises(ConfigError, match="no runtime recognises"):
        registry.load(tmp_path)


def test_servekit_declares_no_entry_points_for_its_builtin_runtimes() -> None:
    """One mechanism for built-ins (the registry's tuple); the entry-point group is for third parties only."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = project.get("entry-points", {}).get("servekit.runtimes", {})
    assert not set(declared) & BUILTIN
    assert BUILTIN <= set(RuntimeRegistry().names)


def test_a_third_party_entry_point_is_found_and_cannot_shadow_a_builtin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    install_plugin(
        tmp_path / "site",
        monkeypatch,
        "[servekit.runtimes]\n"
        "fake = servekit.testing.fakes:FakeRuntime\n"
        "onnx = servekit.testing.fakes:FakeRuntime\n"
        "broken = servekit_test_plugin_missing:Runtime\n",
    )
    with caplog.at_level(logging.WARNING, logger="servekit.serving.runtime.registry"):
        registry = RuntimeRegistry()
    assert "fake" in registry.names and "broken" not in registry.names
    assert isinstance(registry.choose(tmp_path, platform="onnx"), OnnxRuntime)  # the built-in wins
    assert isinstance(registry.choose(write_fake_version(tmp_path / "m", 1)), FakeRuntime)  # found by its files
    assert registry.load(tmp_path / "m" / "1", platform="fake").platform == "fake"
    assert any("runtime plugin broken failed to load" in r.getMessage() for r in caplog.records)


def test_without_the_plugin_the_fake_runtime_is_unknown(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown runtime 'fake'"):
        RuntimeRegistry().choose(write_fake_version(tmp_path, 1), platform="fake")
