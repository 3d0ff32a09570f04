"""The runtime plugin interface: load a version directory, expose signatures, predict on named arrays."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from servekit._utils.processes import usable_cpus
from servekit.config.models import RuntimeOptions
from servekit.serving.runtime.manifest import Manifest
from servekit.types import Signature, TensorMap


@dataclass(frozen=True, slots=True)
class Concurrency:
    """How a servable's ``predict`` uses the machine, for whoever sizes the work around it (batch threads,
    the cores an instance envelope grants).

    ``releases_gil``: the framework drops the GIL while it computes (onnxruntime, TensorFlow, torch, XGBoost and
    LightGBM through their C APIs), so several predict calls overlap and the event loop keeps running; when
    False, extra model threads only queue behind the GIL. ``threads``: how many threads one predict call may
    keep busy (the framework's intra-op pool), 0 when unknown.
    """

    releases_gil: bool
    threads: int


# What a servable that does not say is assumed to do: hold the GIL, one thread (Python code, most estimators).
UNKNOWN_CONCURRENCY = Concurrency(releases_gil=False, threads=1)


def concurrency_of(servable: object) -> Concurrency:
    """The servable's declared :class:`Concurrency` (an optional ``concurrency`` attribute), else the cautious
    default: a servable from an older plugin need not declare it."""
    declared = getattr(servable, "concurrency", None)
    return declared if isinstance(declared, Concurrency) else UNKNOWN_CONCURRENCY


def pool_threads(requested: int) -> int:
    """The threads a framework pool gets: what the server's options ask for, else one per CPU this process may use."""
    return requested if requested > 0 else usable_cpus()


class ListedSignatures(dict[str, Signature]):
    """Signatures plus the model format's own listing of them, for ``servekit inspect``.

    A SavedModel's SignatureDef map says more than the servable signatures do (graph tensor names, the
    ``__saved_model_init_op`` entry, the ops of the graph), and ``saved_model_cli show --all`` prints all of it;
    a runtime that has such a listing hands it over here instead of letting inspect reconstruct it.
    """

    def __init__(self, signatures: Mapping[str, Signature], listing: str) -> None:
        super().__init__(signatures)
        self.listing = listing


@runtime_checkable
class Servable(Protocol):
    """A loaded model version. ``predict`` is called from worker threads, possibly concurrently.

    A servable may also carry ``concurrency: Concurrency`` (see :func:`concurrency_of`); the built-in ones do.
    """

    platform: str

    @property
    def signatures(self) -> Mapping[str, Signature]: ...

    def predict(self, signature: str, inputs: TensorMap) -> dict[str, npt.NDArray[Any]]: ...

    def unload(self) -> None: ...


# A raw answer: the whole body, or the pieces of a streamed one (a handler that yields), pulled one at a time on
# the model's thread; the first piece has already been produced when ``invoke`` returns.
RawAnswer = bytes | Iterator[bytes]


def whole(answer: RawAnswer) -> bytes:
    """A raw answer as one body (a streamed one joined): for callers that do not stream, batch transform's."""
    return answer if isinstance(answer, bytes) else b"".join(answer)


@runtime_checkable
class RawInvocable(Protocol):
    """A servable that takes SageMaker ``/invocations`` bodies itself (the ``inference.py`` contract)."""

    def invoke(self, body: bytes, content_type: str, accept: str) -> tuple[RawAnswer, str]: ...


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
