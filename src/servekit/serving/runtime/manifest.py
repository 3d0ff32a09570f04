"""``servekit.toml`` beside a version's files: names the runtime and may declare signatures; for the ``python``
(handler) runtime, ``entry_point`` names the script in ``code/`` (default ``inference.py``): a SageMaker framework
model's ``SAGEMAKER_PROGRAM``, written by hosting (:mod:`servekit.services.hosting.framework`), and ``python_path``
the folders of libraries its scripts import (absolute paths, put at the end of ``sys.path`` when the model loads:
hosting names servekit's stand-in for ``sagemaker_xgboost_container`` for SageMaker's XGBoost image)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servekit.errors import ConfigError
from servekit.types import PREDICT_METHOD, Signature, TensorSpec

MANIFEST_NAME = "servekit.toml"


@dataclass(frozen=True, slots=True)
class Manifest:
    runtime: str = ""
    signatures: tuple[Signature, ...] = ()
    feature_names: tuple[str, ...] = ()
    class_labels: tuple[str, ...] = ()
    entry_point: str = ""  # the handler runtime's script, relative to code/
    python_path: tuple[str, ...] = ()  # folders of libraries the handler runtime's scripts import


def _tensor(raw: Any, where: str) -> TensorSpec:
    if not isinstance(raw, dict) or "name" not in raw or "datatype" not in raw:
        raise ConfigError(f"{where}: each tensor needs name and datatype (and optional shape)")
    try:
        return TensorSpec(str(raw["name"]), str(raw["datatype"]).upper(), tuple(int(d) for d in raw.get("shape", [-1])))
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def read_manifest(version_dir: Path) -> Manifest:
    path = version_dir / MANIFEST_NAME
    if not path.is_file():
        return Manifest()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    sigs = []
    for i, raw in enumerate(data.get("signatures", [])):
        where = f"{path} signatures[{i}]"
        sigs.append(
            Signature(
                name=str(raw.get("name", "serving_default")),
                inputs=tuple(_tensor(t, where) for t in raw.get("inputs", [])),
                outputs=tuple(_tensor(t, where) for t in raw.get("outputs", [])),
                method=str(raw.get("method", PREDICT_METHOD)),
                class_labels=tuple(str(c) for c in raw.get("class_labels", [])),
                feature_names=tuple(str(f) for f in raw.get("feature_names", [])),
            )
        )
    return Manifest(
        runtime=str(data.get("runtime", "")),
        signatures=tuple(sigs),
        feature_names=tuple(str(f) for f in data.get("feature_names", [])),
        class_labels=tuple(str(c) for c in data.get("class_labels", [])),
        entry_point=str(data.get("entry_point", "")),
        python_path=_python_path(data.get("python_path", []), path),
    )


def _python_path(raw: Any, path: Path) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(p, str) and Path(p).is_absolute() for p in raw):
        raise ConfigError(f"{path}: python_path must be a list of absolute folder paths, not {raw!r}")
    return tuple(raw)
