"""servekit: self-hosted model serving (TF Serving, KServe V2 and SageMaker protocols)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from servekit import _aliases
from servekit._version import __version__
from servekit.errors import ErrorCode, ServekitError

if TYPE_CHECKING:
    from servekit.types import Signature, TensorSpec

_aliases.install()  # the import paths of servekit's tree before its three wings

__all__ = ["ErrorCode", "ServekitError", "Signature", "TensorSpec", "__version__"]


def __getattr__(name: str) -> Any:
    # Signature and TensorSpec are numpy-backed: importing any servekit module (the command line's first, to
    # print its help) would otherwise import numpy too.
    if name in ("Signature", "TensorSpec"):
        return getattr(importlib.import_module("servekit.types"), name)
    raise AttributeError(f"module 'servekit' has no attribute {name!r}")
