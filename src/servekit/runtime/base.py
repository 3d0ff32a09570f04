"""The runtime plugin interface: load a version directory, expose signatures, predict on named arrays."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from servekit.config.models import RuntimeOptions
from servekit.runtime.manifest import Manifest
from servekit.types import Signature, TensorMap


@runtime_checkable
class Servable(Protocol):
    """A loaded model version. ``predict`` is called from worker threads, possibly concurrently."""

    platform: str

    @property
    def signatures(self) -> Mapping[str, Signature]: ...

    def predict(self, signature: str, inputs: TensorMap) -> dict[str, npt.NDArray[Any]]: ...

    def unload(self) -> None: ...


@runtime_checkable
class RawInvocable(Protocol):
    """A servable that takes SageMaker ``/invocations`` bodies itself (the ``inference.py`` contract)."""

    def invoke(self, body: bytes, content_type: str, accept: str) -> tuple[bytes, str]: ...


class Runtime(Protocol):
    name: str

    def can_load(self, path: Path) -> bool:
        """Whether the files in ``path`` look like this runtime's model."""
        ...

    def load(self, path: Path, manifest: Manifest, options: RuntimeOptions) -> Servable: ...


def find_one(path: Path, suffixes: tuple[str, ...]) -> Path | None:
    """The single model file in ``path`` with one of ``suffixes`` (sorted, first wins)."""
    matches = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in suffixes)
    return matches[0] if matches else None


def zeros_row(n_features: int, dtype: Any = np.float64) -> npt.NDArray[Any]:
    return np.zeros((1, n_features), dtype=dtype)
