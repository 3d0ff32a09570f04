"""Where the model to optimize lives and where its new version goes, in TF Serving's directory layout."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from servekit.errors import ConfigError
from servekit.serving.runtime.base import find_one
from servekit.serving.runtime.registry import RuntimeRegistry
from servekit.serving.runtime.sklearn import SUFFIXES as SKLEARN_SUFFIXES

# The runtimes whose models this command can rewrite; everything else is refused by name.
OPTIMIZABLE = ("onnx", "sklearn")


@dataclass(frozen=True, slots=True)
class ModelSource:
    version_dir: Path
    runtime: str  # "onnx" or "sklearn"
    model_file: Path


def _int_dirs(path: Path) -> dict[int, Path]:
    return {int(p.name): p for p in path.iterdir() if p.is_dir() and p.name.isascii() and p.name.isdigit()}


def resolve_model(path: Path) -> ModelSource:
    """A model base (its latest integer version) or a version directory, and the runtime that serves it."""
    if not path.is_dir():
        raise ConfigError(
            f"{path} is not a directory; give a model directory (a base with version directories, or a version)"
        )
    versions = _int_dirs(path)
    version_dir = versions[max(versions)] if versions else path
    try:
        runtime = RuntimeRegistry().choose(version_dir)
    except ConfigError as exc:
        raise ConfigError(f"{path} is not a servekit model directory: {exc}") from None
    if runtime.name == "python":
        raise ConfigError(
            f"{version_dir} is served by an inference.py handler (code/inference.py), whose model servekit cannot "
            "see inside; optimize works on ONNX and scikit-learn (joblib) models"
        )
    if runtime.name not in OPTIMIZABLE:
        raise ConfigError(
            f"{version_dir} uses the {runtime.name!r} runtime; optimize works on ONNX and scikit-learn models"
        )
    model_file = find_one(version_dir, (".onnx",) if runtime.name == "onnx" else SKLEARN_SUFFIXES)
    if model_file is None:
        raise ConfigError(f"{version_dir} names the {runtime.name} runtime but holds no model file for it")
    return ModelSource(version_dir, runtime.name, model_file)


def check_out_base(out: Path) -> None:
    """``--out`` must be a model base: new, empty, or holding integer version directories (and no model files,
    which would mean a version directory was given by mistake)."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; give a model base directory")
    if out.is_dir() and not _int_dirs(out):
        stray = [p.name for p in out.iterdir() if not p.name.startswith(".")]
        if stray:
            raise ConfigError(
                f"--out {out} is neither empty nor a model base (it holds {', '.join(sorted(stray)[:5])} and no "
                "integer version directories); give the model's base directory, where the new version goes beside "
                "the others"
            )


def publish(staged: Path, out: Path) -> Path:
    """Rename a fully written version directory to the next free version number under ``out``. The rename is
    atomic, so a server polling ``out`` sees the whole version or none of it; a name taken meanwhile (another
    writer) moves on to the next number."""
    for _ in range(100):
        versions = _int_dirs(out)
        target = out / str(max(versions, default=0) + 1)
        try:
            staged.rename(target)
        except OSError:
            if target.exists():
                continue
            raise
        return target
    raise ConfigError(f"could not find a free version number under {out}")
