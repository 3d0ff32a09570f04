"""ONNX models through onnxruntime: signatures read from the graph."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from servekit.accelerators.inventory import Gpu
from servekit.config.models import RuntimeOptions
from servekit.errors import ConfigError
from servekit.serving.runtime import devices
from servekit.serving.runtime.base import Concurrency, Servable, find_one, pool_threads
from servekit.serving.runtime.manifest import Manifest
from servekit.types import (
    CLASSIFY_METHOD,
    DEFAULT_SIGNATURE,
    REGRESS_METHOD,
    Signature,
    TensorMap,
    TensorSpec,
)

_ORT_TYPES = {
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(float16)": "FP16",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(bool)": "BOOL",
    "tensor(string)": "BYTES",
}


def _spec(arg: Any) -> TensorSpec | None:
    datatype = _ORT_TYPES.get(arg.type)
    if datatype is None:  # sequences/maps (e.g. sklearn ZipMap) are not tensors; leave them out
        return None
    shape = tuple(d if isinstance(d, int) and d >= 0 else -1 for d in (arg.shape or []))
    return TensorSpec(arg.name, datatype, shape)


class OnnxServable:
    platform = "onnxruntime_onnx"

    def __init__(self, session: Any, manifest: Manifest, threads: int = 0, device: str = devices.CPU) -> None:
        self._session = session
        self.device = device  # where it runs: "cpu" or "cuda:N"
        # onnxruntime runs the graph without the GIL, on its intra-op pool (one thread per core by default).
        self.concurrency = Concurrency(releases_gil=True, threads=pool_threads(threads))
        inputs = tuple(s for s in (_spec(a) for a in session.get_inputs()) if s is not None)
        outputs = tuple(s for s in (_spec(a) for a in session.get_outputs()) if s is not None)
        if len(inputs) != len(session.get_inputs()):
            raise ConfigError("ONNX model has non-tensor inputs, which servekit cannot feed")
        sigs: dict[str, Signature] = {s.name: s for s in manifest.signatures}
        sigs.setdefault(
            DEFAULT_SIGNATURE, Signature(DEFAULT_SIGNATURE, inputs, outputs, feature_names=manifest.feature_names)
        )
        # classify/regress from a converted sklearn graph: a [-1, k] float "probabilities" output
        # (skl2onnx's name) gives classify; a single float output gives regress.
        by_name = {o.name: o for o in outputs}
        probs = by_name.get("probabilities") or by_name.get("scores")
        if len(inputs) == 1 and probs is not None and len(probs.shape) == 2:
            k = probs.shape[1]
            labels = manifest.class_labels or (tuple(str(i) for i in range(k)) if k > 0 else ())
            sigs.setdefault(
                "classify",
                Signature(
                    "classify",
                    inputs,
                    (probs,),
                    CLASSIFY_METHOD,
                    class_labels=labels,
                    feature_names=manifest.feature_names,
                ),
            )
        elif len(inputs) == 1 and len(outputs) == 1 and outputs[0].datatype in ("FP32", "FP64"):
            sigs.setdefault(
                "regress", Signature("regress", inputs, outputs, REGRESS_METHOD, feature_names=manifest.feature_names)
            )
        self._signatures = sigs

    @property
    def signatures(self) -> Mapping[str, Signature]:
        return self._signatures

    def predict(self, signature: str, inputs: TensorMap) -> dict[str, npt.NDArray[Any]]:
        sig = self._signatures[signature]
        names = [o.name for o in sig.outputs]
        results = self._session.run(names, dict(inputs))
        return {n: np.asarray(r) for n, r in zip(names, results, strict=True)}

    def unload(self) -> None:
        self._session = None


class OnnxRuntime:
    name = "onnx"

    def __init__(self, gpus: Callable[[], Sequence[Gpu]] = devices.machine_gpus) -> None:
        self._gpus = gpus  # the visible GPUs (injected by tests that describe a machine with cards)

    def can_load(self, path: Path) -> bool:
        return find_one(path, (".onnx",)) is not None

    def load(self, path: Path, manifest: Manifest, options: RuntimeOptions) -> Servable:
        import onnxruntime as ort

        model_file = find_one(path, (".onnx",))
        if model_file is None:
            raise ConfigError(f"no .onnx file in {path}")
        so = ort.SessionOptions()
        if options.intra_op_threads:
            so.intra_op_num_threads = options.intra_op_threads
        if options.inter_op_threads:
            so.inter_op_num_threads = options.inter_op_threads
        so.log_severity_level = 3
        spin = "1" if options.allow_spinning else "0"
        so.add_session_config_entry("session.intra_op.allow_spinning", spin)
        so.add_session_config_entry("session.inter_op.allow_spinning", spin)
        available = list(ort.get_available_providers())
        gpus = tuple(self._gpus()) if options.device.kind != "cpu" else ()
        placement = devices.onnx_placement(options.device, available, gpus)
        providers = devices.onnx_providers(placement, available, options.gpu_memory_fraction, gpus)
        try:
            session = ort.InferenceSession(
                str(model_file),
                so,
                providers=[name for name, _ in providers],
                provider_options=[opts for _, opts in providers],
            )
        except Exception as exc:  # onnxruntime raises its own exception types for corrupt graphs
            raise ConfigError(f"cannot load {model_file.name}: {exc}") from exc
        placement = _check_fallback(placement, session.get_providers(), options)
        detail = ", ".join(session.get_providers())
        devices.log_placement(path, "onnxruntime", placement, detail)
        return OnnxServable(session, manifest, options.intra_op_threads, placement.device)


def _check_fallback(placement: devices.Placement, used: Sequence[str], options: RuntimeOptions) -> devices.Placement:
    """onnxruntime drops a GPU provider it cannot start (CUDA libraries missing) and runs on the CPU without an
    error: an explicit ``cuda`` refuses that, ``auto`` says so."""
    if placement.gpu_index is None or devices.CUDA_PROVIDER in used or devices.TENSORRT_PROVIDER in used:
        return placement
    why = f"onnxruntime could not start {devices.CUDA_PROVIDER} (session providers: {', '.join(used)})"
    if options.device.kind == "cuda":
        raise devices.DeviceUnavailable(f"--device {options.device.describe()}: {why}")
    return devices.Placement(devices.CPU, why)
