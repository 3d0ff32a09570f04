"""One optimize run: resolve the model, build the new graph in a staging directory under ``--out``, load both
versions with servekit's runtimes, compare them, and publish the new version (an atomic rename, so a serving
process hot-swaps to it whole) or remove it when the accuracy cost is over the bound."""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servekit.errors import ConfigError
from servekit.serving.runtime.base import Servable
from servekit.serving.runtime.manifest import MANIFEST_NAME, read_manifest
from servekit.serving.runtime.registry import RuntimeRegistry
from servekit.tools.optimize import onnx_passes
from servekit.tools.optimize.data import Dataset, read_labels, read_rows, synthetic_rows
from servekit.tools.optimize.latency import Latency, measure
from servekit.tools.optimize.manifest import render_manifest
from servekit.tools.optimize.quality import Quality, compare
from servekit.tools.optimize.source import ModelSource, check_out_base, publish, resolve_model
from servekit.types import DEFAULT_SIGNATURE

REPORT_NAME = "optimize_report.json"
SYNTHETIC_ROWS = 256


@dataclass(frozen=True, slots=True)
class OptimizeOptions:
    model: Path
    out: Path
    quantize: str = "none"  # "int8" or "none"
    static: bool = False
    calibration: Path | None = None
    validation: Path | None = None
    labels: Path | None = None
    label_column: str | None = None
    max_accuracy_drop: float = 0.01
    force: bool = False
    batch_sizes: tuple[int, ...] = (1, 8, 64)
    rounds: int = 100
    graph_level: str = "extended"

    def check(self) -> None:
        if self.quantize not in ("int8", "none"):
            raise ConfigError(f"--quantize must be int8 or none, got {self.quantize!r}")
        if self.static and self.quantize != "int8":
            raise ConfigError("--static is static int8 quantization: give --quantize int8 with it")
        if self.static and self.calibration is None:
            raise ConfigError("--static needs --calibration rows (JSON Lines) to calibrate activation ranges")
        if self.calibration is not None and not self.static:
            raise ConfigError("--calibration is used by --static quantization only; add --static")
        if self.labels is not None and self.label_column is not None:
            raise ConfigError("give --labels or --label-column, not both")
        if (self.labels is not None or self.label_column is not None) and self.validation is None:
            raise ConfigError("labels need --validation rows to go with them")
        if not self.batch_sizes or any(n < 1 for n in self.batch_sizes):
            raise ConfigError("--batch-sizes must be positive integers, e.g. 1,8,64")
        if self.rounds < 1:
            raise ConfigError("--rounds must be at least 1")
        if self.max_accuracy_drop < 0:
            raise ConfigError("--max-accuracy-drop must be 0 or more")
        if self.graph_level not in onnx_passes.GRAPH_LEVELS:
            raise ConfigError(f"--graph-level must be one of {', '.join(onnx_passes.GRAPH_LEVELS)}")


@dataclass(slots=True)
class Outcome:
    source: ModelSource
    steps: list[str]
    quality: Quality
    latency: list[Latency]
    size_before: int
    size_after: int
    data_source: str
    accepted: bool
    forced: bool
    options: OptimizeOptions
    version_dir: Path | None = None
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        q = self.quality
        return {
            "source": str(self.source.version_dir),
            "runtime_before": self.source.runtime,
            "runtime_after": "onnx",
            "version_dir": str(self.version_dir) if self.version_dir else None,
            "steps": self.steps,
            "notes": self.notes,
            "size_bytes": {"before": self.size_before, "after": self.size_after},
            "latency": {
                "measured": "in process, servekit's runtimes, interleaved rounds",
                "rounds": self.options.rounds,
                "per_batch_size": [
                    {
                        "batch_size": lat.batch_size,
                        "before_p50_ms": lat.before_p50_ms,
                        "after_p50_ms": lat.after_p50_ms,
                        "before_p90_ms": lat.before_p90_ms,
                        "after_p90_ms": lat.after_p90_ms,
                        "speedup_p50": lat.speedup,
                    }
                    for lat in self.latency
                ],
            },
            "validation": {
                "data": self.data_source,
                "rows": q.rows,
                "task": q.task,
                "signature": q.signature,
                "output": q.output,
                "agreement": q.agreement,
                "output_diff": q.output_diff,
                "accuracy_before": q.accuracy_before,
                "accuracy_after": q.accuracy_after,
                "mae_before": q.mae_before,
                "mae_after": q.mae_after,
                "rmse_before": q.rmse_before,
                "rmse_after": q.rmse_after,
            },
            "drop": q.drop,
            "drop_basis": q.drop_basis,
            "max_accuracy_drop": self.options.max_accuracy_drop,
            "accepted": self.accepted,
            "forced": self.forced,
        }


def _size(path: Path) -> int:
    return path.stat().st_size


def _check_contract(before: Servable, after: Servable) -> None:
    """The new version must answer every signature the old one did, with the same inputs."""
    for name, sig in before.signatures.items():
        new = after.signatures.get(name)
        if new is None:
            raise ConfigError(f"the optimized model lost the signature {name!r}")
        if new.inputs != sig.inputs:
            raise ConfigError(f"signature {name!r} changed its inputs: {sig.inputs} -> {new.inputs}")


def _datasets(options: OptimizeOptions, before: Servable) -> tuple[Dataset, Dataset | None, str]:
    sig = before.signatures[DEFAULT_SIGNATURE]
    if options.validation is not None:
        data = read_rows(options.validation, sig, label_column=options.label_column)
        if options.labels is not None:
            data = Dataset(data.inputs, data.rows, read_labels(options.labels, data.rows))
        source = str(options.validation)
    else:
        data, source = synthetic_rows(sig, SYNTHETIC_ROWS), f"{SYNTHETIC_ROWS} random rows (no --validation given)"
    calibration = read_rows(options.calibration, sig, "calibration data") if options.calibration else None
    return data, calibration, source


def _build(
    source: ModelSource,
    before: Servable,
    options: OptimizeOptions,
    calibration: Dataset | None,
    staged: Path,
    work: Path,
    steps: list[str],
    notes: list[str],
) -> Path:
    """Write the new model file (and manifest) into ``staged``; returns the model file."""
    if source.runtime == "sklearn":
        onnx_passes.require_onnx()
        import onnx

        from servekit.tools.optimize.convert import sklearn_to_onnx

        float_model = work / "converted.onnx"
        onnx.save(sklearn_to_onnx(source.model_file, before.signatures), str(float_model))
        target = staged / "model.onnx"
        manifest = render_manifest(read_manifest(source.version_dir), "onnx", before.signatures.values())
        (staged / MANIFEST_NAME).write_text(manifest, encoding="utf-8")
        steps.append("converted to ONNX with skl2onnx (float32 inside; inputs, outputs and signatures unchanged)")
    else:
        float_model, target = source.model_file, staged / source.model_file.name
    graph_input = float_model
    if options.quantize == "int8":
        quantized = work / "quantized.onnx"
        onnx_passes.quantize_int8(float_model, quantized, work, calibration.inputs if calibration else None)
        int8_nodes = onnx_passes.quantized_ops(quantized)
        kind = f"static (QDQ, calibrated on {calibration.rows} rows)" if calibration else "dynamic"
        steps.append(f"int8 {kind} quantization: {int8_nodes} int8 nodes")
        if int8_nodes == 0:
            notes.append("quantization found no MatMul/Gemm/Conv it handles; only the graph changed")
        graph_input = quantized
    onnx_passes.optimize_graph(graph_input, target, options.graph_level)
    steps.append(f"onnxruntime graph optimization saved at level {options.graph_level}")
    return target


def optimize(options: OptimizeOptions) -> Outcome:
    options.check()
    source = resolve_model(options.model)
    check_out_base(options.out)
    registry = RuntimeRegistry()
    before = registry.load(source.version_dir)
    after: Servable | None = None
    staged: Path | None = None
    created_out = not options.out.exists()
    try:
        data, calibration, data_source = _datasets(options, before)
        options.out.mkdir(parents=True, exist_ok=True)
        # A dot name: the repository poller ignores it (not an integer) until the finished rename.
        staged = Path(tempfile.mkdtemp(prefix=".optimize-", dir=options.out))
        staged.chmod(0o755)
        shutil.copytree(
            source.version_dir,
            staged,
            dirs_exist_ok=True,
            ignore=lambda d, names: [n for n in names if Path(d) / n == source.model_file or n == REPORT_NAME],
        )
        steps: list[str] = []
        notes: list[str] = []
        with tempfile.TemporaryDirectory(prefix="servekit-optimize-") as work:
            target = _build(source, before, options, calibration, staged, Path(work), steps, notes)
        after = registry.load(staged)
        _check_contract(before, after)
        quality = compare(before, after, data)
        latency = measure(before, after, DEFAULT_SIGNATURE, data, options.batch_sizes, options.rounds)
        within = quality.drop <= options.max_accuracy_drop
        outcome = Outcome(
            source,
            steps,
            quality,
            latency,
            _size(source.model_file),
            _size(target),
            data_source,
            accepted=within or options.force,
            forced=options.force and not within,
            options=options,
        )
        outcome.notes += notes
        if quality.task == "classification" and quality.agreement is not None and data.labels is None:
            outcome.notes.append("no labels: the bound applies to disagreement between the two versions")
        if outcome.accepted:
            (staged / REPORT_NAME).write_text(json.dumps(outcome.as_json(), indent=2) + "\n", encoding="utf-8")
            outcome.version_dir = publish(staged, options.out)
            staged = None
        return outcome
    finally:
        before.unload()
        if after is not None:
            after.unload()
        if staged is not None:  # refused or failed: leave --out as it was
            shutil.rmtree(staged, ignore_errors=True)
            if created_out and options.out.is_dir() and not any(options.out.iterdir()):
                options.out.rmdir()
