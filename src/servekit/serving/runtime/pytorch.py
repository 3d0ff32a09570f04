"""PyTorch models, the ``servekit[torch]`` extra: TorchScript (``torch.jit.save``, e.g. ``model.pt``) and
``torch.export`` ExportedPrograms (``torch.export.save``, ``model.pt2``).

A TorchScript file says nothing about its tensors, so its signature comes from a ``servekit.toml``
(``[[signatures]]`` with inputs/outputs names, datatypes and shapes, in ``forward``'s argument and result order)
or from example inputs saved beside it with ``torch.save`` (``example_inputs.pt``: a tuple of tensors in
``forward``'s order, or a dict by argument name), which the model is run on once at load to learn its outputs.
An ExportedProgram carries its own input names and sample inputs, and dynamic dimensions show as -1.
Outputs are named as the model returns them: a dict's keys, else ``output_0``, ``output_1``, ...

torch computes without the GIL on its intra-op pool (``torch.set_num_threads``, process-wide, from the server's
``intra_op_threads``).
"""

from __future__ import annotations

import logging
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from servekit.config.models import RuntimeOptions
from servekit.errors import ConfigError
from servekit.serving.runtime import devices
from servekit.serving.runtime.base import Concurrency, Servable
from servekit.serving.runtime.manifest import Manifest
from servekit.types import DEFAULT_SIGNATURE, Signature, TensorMap, TensorSpec, v2_datatype

log = logging.getLogger(__name__)
EXAMPLE_INPUTS = "example_inputs.pt"
TORCHSCRIPT_SUFFIXES = (".pt", ".pth", ".torchscript")
EXPORT_SUFFIXES = (".pt2",)


def _archive_names(path: Path) -> list[str]:
    try:
        with zipfile.ZipFile(path) as zf:
            return zf.namelist()
    except (zipfile.BadZipFile, OSError):
        return []


def _is_torchscript(path: Path) -> bool:
    """A TorchScript archive holds compiled ``code/``; a ``torch.save`` file (state dict, example inputs) does not."""
    return any(n.split("/", 2)[1:2] == ["code"] for n in _archive_names(path))


def _is_exported(path: Path) -> bool:
    return any(n.endswith("/archive_format") or n == "archive_format" for n in _archive_names(path))


def _model_file(path: Path) -> tuple[Path, str] | None:
    files = sorted(p for p in path.iterdir() if p.is_file())
    for f in files:
        if f.suffix.lower() in EXPORT_SUFFIXES and _is_exported(f):
            return f, "export"
    for f in files:
        if f.suffix.lower() in TORCHSCRIPT_SUFFIXES and f.name != EXAMPLE_INPUTS and _is_torchscript(f):
            return f, "script"
    return None


def import_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise ConfigError(
            "this version holds a PyTorch model, but torch is not installed: pip install 'servekit[torch]'"
        ) from None
    return torch


def place(torch: Any, options: RuntimeOptions) -> devices.Placement:
    """Where torch runs the model (``torch.cuda.is_available``/``device_count``), with the memory fraction set
    on that card (``torch.cuda.set_per_process_memory_fraction``; 0 leaves torch's caching allocator to grow)."""
    cuda = options.device.kind != "cpu" and bool(torch.cuda.is_available())
    count = int(torch.cuda.device_count()) if cuda else 0
    machine = len(devices.machine_gpus()) if options.device.kind != "cpu" and not cuda else count
    placement = devices.torch_placement(options.device, cuda, count, machine)
    if placement.gpu_index is not None and options.gpu_memory_fraction > 0:
        torch.cuda.set_per_process_memory_fraction(options.gpu_memory_fraction, placement.gpu_index)
    return placement


def configure_threads(torch: Any, options: RuntimeOptions) -> int:
    """Apply the server's thread options to torch's process-wide pools; returns the intra-op pool size."""
    if options.intra_op_threads > 0 and torch.get_num_threads() != options.intra_op_threads:
        torch.set_num_threads(options.intra_op_threads)
    if options.inter_op_threads > 0 and torch.get_num_interop_threads() != options.inter_op_threads:
        try:
            torch.set_num_interop_threads(options.inter_op_threads)
        except RuntimeError:  # fixed once torch has run parallel work
            log.warning(
                "torch's inter-op pool is already running; inter_op_threads=%d not applied", options.inter_op_threads
            )
    return int(torch.get_num_threads())


def _datatype(tensor: Any) -> str:
    return v2_datatype(np.dtype(str(tensor.dtype).removeprefix("torch.")))


def _spec(name: str, tensor: Any, dynamic: Sequence[bool] | None = None) -> TensorSpec:
    """A tensor's spec; dimension 0 is the batch (-1), and so is any dimension ``dynamic`` marks."""
    shape = tuple(-1 if i == 0 or (dynamic is not None and dynamic[i]) else int(d) for i, d in enumerate(tensor.shape))
    return TensorSpec(name, _datatype(tensor), shape)


def _named_outputs(result: Any, names: Sequence[str] = ()) -> dict[str, Any]:
    """The model's result as named tensors: a dict by key; a tensor or tuple by ``names`` or ``output_<i>``."""
    if isinstance(result, Mapping):
        return {str(k): v for k, v in result.items()}
    values = list(result) if isinstance(result, list | tuple) else [result]
    if names and len(names) != len(values):
        raise ValueError(f"the model returned {len(values)} outputs; the signature names {len(names)}")
    return {(names[i] if names else f"output_{i}"): v for i, v in enumerate(values)}


class TorchServable:
    def __init__(
        self,
        torch: Any,
        module: Any,
        signature: Signature,
        extra: Mapping[str, Signature],
        platform: str,
        threads: int,
        device: str = devices.CPU,
    ) -> None:
        self._torch = torch
        self._module = module
        self.device = device  # where it runs: "cpu" or "cuda:N"; inputs are copied there, outputs back
        self.platform = platform
        self._signatures = {signature.name: signature, **extra}
        self.concurrency = Concurrency(releases_gil=True, threads=threads)

    @property
    def signatures(self) -> Mapping[str, Signature]:
        return self._signatures

    def predict(self, signature: str, inputs: TensorMap) -> dict[str, npt.NDArray[Any]]:
        sig = self._signatures[signature]
        torch = self._torch
        args = [torch.from_numpy(np.ascontiguousarray(inputs[t.name])).to(self.device) for t in sig.inputs]
        with torch.inference_mode():
            result = self._module(*args)
        named = _named_outputs(result, [] if isinstance(result, Mapping) else [o.name for o in sig.outputs])
        return {o.name: named[o.name].detach().cpu().numpy() for o in sig.outputs}

    def unload(self) -> None:
        self._module = None


def _from_examples(torch: Any, module: Any, names: Sequence[str], examples: Sequence[Any], dynamic: Any) -> Signature:
    """The signature the model has on its example inputs: names, dtypes and shapes (batch dimension -1)."""
    with torch.inference_mode():
        result = module(*examples)
    outputs = _named_outputs(result)
    inputs = tuple(
        _spec(n, t, dynamic[i] if dynamic else None) for i, (n, t) in enumerate(zip(names, examples, strict=True))
    )
    return Signature(DEFAULT_SIGNATURE, inputs, tuple(_spec(n, t) for n, t in outputs.items()))


def _script_argument_names(module: Any) -> list[str]:
    try:
        return [a.name for a in module.forward.schema.arguments][1:]  # less self
    except AttributeError:  # a traced function rather than a module
        return []


def _load_examples(torch: Any, path: Path, names: list[str]) -> tuple[list[str], list[Any]]:
    """``example_inputs.pt``: a tensor, a tuple of tensors in ``forward``'s order, or a dict by argument name."""
    try:
        saved = torch.load(path, weights_only=True)
    except Exception as exc:  # torch raises UnpicklingError, RuntimeError... for files it cannot read
        raise ConfigError(f"cannot read {path.name}: {type(exc).__name__}: {exc}") from exc
    if isinstance(saved, Mapping):
        order = [n for n in names if n in saved] if names and set(saved) == set(names) else list(saved)
        return [str(n) for n in order], [saved[n] for n in order]
    values = list(saved) if isinstance(saved, list | tuple) else [saved]
    if names and len(names) != len(values):
        raise ConfigError(f"{path.name} holds {len(values)} tensors; forward takes {len(names)} ({', '.join(names)})")
    return (names or [f"input_{i}" for i in range(len(values))]), values


class TorchRuntime:
    name = "torch"

    def can_load(self, path: Path) -> bool:
        return _model_file(path) is not None

    def load(self, path: Path, manifest: Manifest, options: RuntimeOptions) -> Servable:
        found = _model_file(path)
        if found is None:
            raise ConfigError(f"no TorchScript (.pt) or torch.export (.pt2) archive in {path}")
        model_file, kind = found
        torch = import_torch()
        threads = configure_threads(torch, options)
        placement = place(torch, options)
        try:
            if kind == "export":
                program = torch.export.load(str(model_file))
                module = program.module()
            else:
                program = None
                module = torch.jit.load(str(model_file), map_location="cpu")
                module.eval()
        except Exception as exc:  # torch's own errors for corrupt or incompatible archives
            raise ConfigError(f"cannot load {model_file.name}: {type(exc).__name__}: {exc}") from exc
        declared = {s.name: s for s in manifest.signatures}
        if DEFAULT_SIGNATURE in declared:
            main = declared.pop(DEFAULT_SIGNATURE)
        elif program is not None:
            main = self._exported_signature(torch, program, module)
        elif (path / EXAMPLE_INPUTS).is_file():
            names, examples = _load_examples(torch, path / EXAMPLE_INPUTS, _script_argument_names(module))
            try:
                main = _from_examples(torch, module, names, examples, None)
            except Exception as exc:
                raise ConfigError(f"{model_file.name} does not run on {EXAMPLE_INPUTS}: {exc}") from exc
        elif declared:
            first = next(iter(declared))
            main = declared.pop(first)
        else:
            raise ConfigError(
                f"{model_file.name} is TorchScript, which does not record its tensors: declare a signature in "
                f"servekit.toml or save example inputs beside it as {EXAMPLE_INPUTS} (torch.save)"
            )
        platform = "pytorch_export" if kind == "export" else "pytorch_libtorch"
        if placement.gpu_index is not None:
            try:
                module = module.to(placement.device)
            except Exception as exc:  # a module holding CPU-only state, or out of GPU memory
                raise ConfigError(f"cannot move {model_file.name} to {placement.device}: {exc}") from exc
        devices.log_placement(path, "torch", placement)
        return TorchServable(torch, module, main, declared, platform, threads, placement.device)

    @staticmethod
    def _exported_signature(torch: Any, program: Any, module: Any) -> Signature:
        """Input names and dynamic dimensions from the program's graph, dtypes and output shapes from running
        the sample inputs ``torch.export.save`` kept."""
        names = [str(n) for n in program.graph_signature.user_inputs]
        placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
        dynamic = []
        for name in names:
            val = placeholders[name].meta.get("val") if name in placeholders else None
            shape = list(getattr(val, "shape", []))
            dynamic.append([not isinstance(d, int) for d in shape])
        sample: tuple[tuple[Any, ...], dict[str, Any]] = program.example_inputs or ((), {})
        args, kwargs = sample
        examples = [*args, *(kwargs[n] for n in names[len(args) :])]
        if len(examples) != len(names):
            raise ConfigError("the ExportedProgram has no sample inputs to learn its outputs from; declare a signature")
        try:
            return _from_examples(torch, module, names, examples, dynamic)
        except Exception as exc:
            raise ConfigError(f"the ExportedProgram does not run on its own sample inputs: {exc}") from exc
