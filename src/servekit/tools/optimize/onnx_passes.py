"""What is done to an ONNX graph: onnxruntime's offline graph optimization and int8 quantization.

Graph optimization is saved at ``ORT_ENABLE_EXTENDED`` by default, not ``ALL``: the extended level's fusions
(GELU, LayerNorm, MatMul+Add, attention ...) are contrib ops that every CPU build of onnxruntime runs, while
``ALL`` adds layout transformations (NCHWc) chosen for this machine's vector width, which onnxruntime documents
as valid only on the hardware that produced them. The serving session applies ``ALL`` again at load (its default
level), on the machine that serves, so nothing is lost by saving at the portable level.

Quantization follows onnxruntime's recipe: pre-process (shape inference and basic-level optimization, so the
quantizer sees plain ops it knows rather than fused contrib ops), quantize, then optimize the quantized graph.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy.typing as npt

from servekit.errors import ConfigError

log = logging.getLogger(__name__)

GRAPH_LEVELS = ("basic", "extended", "all")


def require_onnx() -> None:
    """onnxruntime.quantization and the graph edits need the ``onnx`` package, which serving does not."""
    try:
        import onnx  # noqa: F401
    except ImportError:
        raise ConfigError("servekit optimize needs the onnx package: pip install 'servekit[optimize]'") from None


def optimize_graph(src: Path, dst: Path, level: str = "extended") -> None:
    """Let onnxruntime optimize ``src`` at ``level`` and save the optimized graph as ``dst``."""
    import onnxruntime as ort

    levels = {
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }
    if level not in levels:
        raise ConfigError(f"--graph-level must be one of {', '.join(GRAPH_LEVELS)}, got {level!r}")
    so = ort.SessionOptions()
    so.graph_optimization_level = levels[level]
    so.optimized_model_filepath = str(dst)
    so.log_severity_level = 3
    try:
        ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's own exception types
        raise ConfigError(f"onnxruntime cannot optimize {src.name}: {exc}") from None


class _Rows:
    """A ``CalibrationDataReader`` over calibration rows, fed in batches (the model sees batched data)."""

    def __init__(self, inputs: dict[str, npt.NDArray[Any]], batch: int = 32) -> None:
        n = len(next(iter(inputs.values())))
        self._batches: Iterator[dict[str, npt.NDArray[Any]]] = iter(
            [{k: v[i : i + batch] for k, v in inputs.items()} for i in range(0, n, batch)]
        )

    def get_next(self) -> dict[str, npt.NDArray[Any]] | None:
        return next(self._batches, None)


def _pre_process(src: Path, dst: Path) -> Path:
    """onnxruntime's quantization pre-processing; symbolic shape inference does not know every op (the
    ai.onnx.ml ones of a converted sklearn model), so without it if need be, and with neither as a last resort."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    for skip_symbolic in (False, True):
        try:
            quant_pre_process(str(src), str(dst), skip_symbolic_shape=skip_symbolic)
        except Exception as exc:  # any failure here only means quantizing the graph as it is
            log.info("quantization pre-processing (skip_symbolic_shape=%s) failed: %s", skip_symbolic, exc)
            continue
        return dst
    return src


def quantize_int8(src: Path, dst: Path, work: Path, calibration: dict[str, npt.NDArray[Any]] | None = None) -> None:
    """int8 weights: dynamic (activations quantized at run time) without ``calibration``, else static (QDQ,
    activation ranges calibrated on the given rows)."""
    require_onnx()
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    prepared = _pre_process(src, work / "preprocessed.onnx")
    try:
        if calibration is None:
            quantize_dynamic(str(prepared), str(dst), weight_type=QuantType.QInt8)
        else:

            class Reader(CalibrationDataReader):  # type: ignore[misc]  # the base is untyped
                def __init__(self, rows: _Rows) -> None:
                    self._rows = rows

                def get_next(self) -> dict[str, npt.NDArray[Any]] | None:
                    return self._rows.get_next()

            quantize_static(
                str(prepared),
                str(dst),
                Reader(_Rows(calibration)),
                quant_format=QuantFormat.QDQ,
                activation_type=QuantType.QInt8,
                weight_type=QuantType.QInt8,
            )
    except Exception as exc:  # the quantizer raises plain exceptions for graphs it cannot handle
        raise ConfigError(f"onnxruntime cannot quantize {src.name}: {type(exc).__name__}: {exc}") from None


def quantized_ops(path: Path) -> int:
    """How many nodes of the graph at ``path`` work on int8 (0 means quantization changed nothing)."""
    import onnx

    model = onnx.load(str(path))
    markers = ("QuantizeLinear", "DequantizeLinear", "MatMulInteger", "ConvInteger", "QLinear", "DynamicQuantize")
    return sum(1 for node in model.graph.node if any(m in node.op_type for m in markers))
