"""Fakes for the serving core: no model framework, behaviour driven by files the test writes.

A fake version directory holds ``fake.txt`` (see :func:`write_fake_version`). :class:`FakeLoader` loads it for the
model manager directly; :class:`FakeRuntime` is the same as a runtime plugin, so a server (or a
``RuntimeRegistry``) loads fake versions the way it loads real models.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from servekit.config.models import ModelConfig, RuntimeOptions
from servekit.serving.runtime.manifest import Manifest
from servekit.types import DEFAULT_SIGNATURE, Signature, TensorMap, TensorSpec

FAKE_FILE = "fake.txt"


class FakeServable:
    """Adds ``offset`` to its FP32 input ``x`` [-1, 2]; ``block`` lets a test hold predict() open."""

    platform = "fake"

    def __init__(self, offset: float, raise_on_predict: bool = False) -> None:
        self.offset = offset
        self.raise_on_predict = raise_on_predict
        self.unloaded = False
        self.block = threading.Event()
        self.block.set()
        self._signatures = {
            DEFAULT_SIGNATURE: Signature(
                DEFAULT_SIGNATURE, (TensorSpec("x", "FP32", (-1, 2)),), (TensorSpec("y", "FP32", (-1, 2)),)
            )
        }

    @property
    def signatures(self) -> Mapping[str, Signature]:
        return self._signatures

    def predict(self, signature: str, inputs: TensorMap) -> dict[str, npt.NDArray[Any]]:
        self.block.wait(timeout=30)
        if self.raise_on_predict:
            raise RuntimeError("fake model failure")
        return {"y": np.asarray(inputs["x"], dtype=np.float32) + np.float32(self.offset)}

    def unload(self) -> None:
        self.unloaded = True


def write_fake_version(base: Path, version: int, content: str = "") -> Path:
    """A version directory whose ``fake.txt`` holds the offset (or 'corrupt' / 'raise')."""
    d = base / str(version)
    d.mkdir(parents=True, exist_ok=True)
    (d / FAKE_FILE).write_text(content or str(version))
    return d


def load_fake_version(path: Path) -> FakeServable:
    """The servable of a fake version directory: ``fake.txt`` holding a number adds it, 'corrupt' fails to load
    (``ValueError``), 'raise' loads but fails on every predict."""
    text = (path / FAKE_FILE).read_text().strip()
    if text == "corrupt":
        raise ValueError(f"corrupt model file in {path}")
    return FakeServable(0.0 if text == "raise" else float(text), raise_on_predict=text == "raise")


class FakeRuntime:
    """A runtime plugin (``servekit.serving.runtime.base.Runtime``) for fake version directories: it recognises a
    directory holding ``fake.txt`` and loads a :class:`FakeServable` from it, so integration tests can serve
    models without loading real ones. Register it with ``RuntimeRegistry((FakeRuntime(), ...))``, or as a
    ``servekit.runtimes`` entry point named ``fake``. Records the directories it loaded."""

    name = "fake"

    def __init__(self) -> None:
        self.loaded: list[Path] = []
        self._lock = threading.Lock()  # loads may run on several load threads

    def can_load(self, path: Path) -> bool:
        return (path / FAKE_FILE).is_file()

    def load(self, path: Path, manifest: Manifest, options: RuntimeOptions) -> FakeServable:
        servable = load_fake_version(path)
        with self._lock:
            self.loaded.append(path)
        return servable


class FakeLoader:
    """A manager loader reading ``fake.txt``: a number loads, 'corrupt' fails, 'raise' fails on predict."""

    def __init__(self) -> None:
        self.loaded: list[tuple[str, int]] = []
        self.servables: dict[tuple[str, int], FakeServable] = {}
        self.gate = threading.Event()  # cleared: load() waits, so tests can observe LOADING
        self.gate.set()

    def __call__(self, path: str, model: ModelConfig) -> FakeServable:
        self.gate.wait(timeout=30)
        version = int(Path(path).name)
        servable = load_fake_version(Path(path))
        self.loaded.append((model.name, version))
        self.servables[(model.name, version)] = servable
        return servable
