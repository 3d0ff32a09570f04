"""Runtime lookup: built-ins plus any plugin registered under the ``servekit.runtimes`` entry point."""

from __future__ import annotations

import logging
from importlib.metadata import entry_points
from pathlib import Path

from servekit.config.models import RuntimeOptions
from servekit.errors import ConfigError
from servekit.serving.runtime.base import Runtime, Servable
from servekit.serving.runtime.handler import HandlerRuntime
from servekit.serving.runtime.lightgbm_native import LightGBMRuntime
from servekit.serving.runtime.manifest import read_manifest
from servekit.serving.runtime.onnx import OnnxRuntime
from servekit.serving.runtime.pytorch import TorchRuntime
from servekit.serving.runtime.saved_model import SavedModelRuntime
from servekit.serving.runtime.sklearn import SklearnRuntime
from servekit.serving.runtime.xgboost_native import XGBoostRuntime, unreadable_sagemaker_model

log = logging.getLogger(__name__)

# The built-in runtimes are listed here and only here (servekit registers no entry points for them); the
# ``servekit.runtimes`` entry-point group is for third-party runtimes, which cannot replace a built-in.
# Detection order: a handler overrides model files (SageMaker semantics), then ONNX, then joblib, then the
# formats of the optional frameworks (whose modules import their framework only when they load a model).
_BUILTIN: tuple[Runtime, ...] = (
    HandlerRuntime(),
    OnnxRuntime(),
    SklearnRuntime(),
    SavedModelRuntime(),
    TorchRuntime(),
    XGBoostRuntime(),
    LightGBMRuntime(),
)
_ALIASES = {
    "onnxruntime_onnx": "onnx",
    "onnxruntime": "onnx",
    "scikit-learn": "sklearn",
    "python_handler": "python",
    "sagemaker": "python",
    "saved_model": "tensorflow",
    "tensorflow_savedmodel": "tensorflow",  # Triton's platform name
    "pytorch": "torch",
    "torchscript": "torch",
    "pytorch_libtorch": "torch",  # Triton's platform name
    "pytorch_export": "torch",
    "xgboost_native": "xgboost",
    "lightgbm_native": "lightgbm",
}


class RuntimeRegistry:
    def __init__(self, runtimes: tuple[Runtime, ...] | None = None) -> None:
        self._runtimes: dict[str, Runtime] = {r.name: r for r in (runtimes or _BUILTIN)}
        if runtimes is None:
            for ep in entry_points(group="servekit.runtimes"):
                if ep.name not in self._runtimes:
                    try:
                        self._runtimes[ep.name] = ep.load()()
                    except Exception as exc:  # a broken plugin must not stop the server
                        log.warning("runtime plugin %s failed to load: %s", ep.name, exc)

    @property
    def names(self) -> list[str]:
        return list(self._runtimes)

    def choose(self, path: Path, platform: str = "") -> Runtime:
        """The runtime named by servekit.toml or ``platform``, else the first that recognises the files."""
        manifest = read_manifest(path)
        wanted = manifest.runtime or platform
        if wanted:
            key = _ALIASES.get(wanted, wanted)
            if key not in self._runtimes:
                raise ConfigError(f"unknown runtime {wanted!r}; available: {', '.join(self._runtimes)}")
            return self._runtimes[key]
        for runtime in self._runtimes.values():
            if runtime.can_load(path):
                return runtime
        old_xgboost = unreadable_sagemaker_model(path)
        if old_xgboost is not None:
            raise ConfigError(old_xgboost)
        raise ConfigError(
            f"no runtime recognises the files in {path}: expected code/inference.py, a .onnx file, a "
            f".joblib/.pkl file, a SavedModel (saved_model.pb), a TorchScript .pt or torch.export .pt2 archive, "
            f"an XGBoost .json/.ubj/.bin (or SageMaker's xgboost-model) or a LightGBM .txt model (or name the runtime "
            "in servekit.toml)"
        )

    def load(self, path: Path, platform: str = "", options: RuntimeOptions | None = None) -> Servable:
        if not path.is_dir():
            raise ConfigError(f"version directory {path} does not exist")
        runtime = self.choose(path, platform)
        return runtime.load(path, read_manifest(path), options or RuntimeOptions())
