"""The GPUs this machine has, as NVIDIA's own tools report them, and the ones a process may use.

Detection tries NVML through ``pynvml`` (the ``nvidia-ml-py`` package, servekit's ``gpu`` extra), then
``nvidia-smi``, then concludes there is none; both readers are injectable so tests can describe any machine.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int  # NVML's / nvidia-smi's index, which CUDA_VISIBLE_DEVICES names
    name: str
    memory_bytes: int  # total memory of the card
    uuid: str = ""


def load_nvml() -> Any | None:
    """``pynvml`` initialised, or None when it is not installed or finds no driver."""
    try:
        import pynvml  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound / DriverNotLoaded on a machine without a card
        log.debug("NVML is installed but not usable: %s", exc)
        return None
    return pynvml


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def gpus_from_nvml(nvml: Any) -> tuple[Gpu, ...]:
    """The cards NVML lists (``nvmlDeviceGetCount``, ``...GetName``, ``...GetMemoryInfo``, ``...GetUUID``)."""
    out = []
    for i in range(int(nvml.nvmlDeviceGetCount())):
        handle = nvml.nvmlDeviceGetHandleByIndex(i)
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        out.append(
            Gpu(i, _text(nvml.nvmlDeviceGetName(handle)), int(memory.total), _text(nvml.nvmlDeviceGetUUID(handle)))
        )
    return tuple(out)


NVIDIA_SMI_QUERY = ("--query-gpu=index,name,memory.total,uuid", "--format=csv,noheader,nounits")


def parse_nvidia_smi(text: str) -> tuple[Gpu, ...]:
    """``nvidia-smi --query-gpu=index,name,memory.total,uuid --format=csv,noheader,nounits`` output (MiB)."""
    out = []
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 3 or not fields[0].isdigit():
            continue
        try:
            memory = int(float(fields[2]) * 2**20)
        except ValueError:
            memory = 0
        out.append(Gpu(int(fields[0]), fields[1], memory, fields[3] if len(fields) > 3 else ""))
    return tuple(out)


def gpus_from_nvidia_smi(run: Callable[[Sequence[str]], str | None] | None = None) -> tuple[Gpu, ...] | None:
    """The cards ``nvidia-smi`` lists; None when there is no ``nvidia-smi`` or it fails (no driver)."""
    if run is None:
        run = _run
    text = run(["nvidia-smi", *NVIDIA_SMI_QUERY])
    return None if text is None else parse_nvidia_smi(text)


def _run(argv: Sequence[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def detect_gpus(
    nvml: Callable[[], Any | None] = load_nvml, smi: Callable[[], tuple[Gpu, ...] | None] = gpus_from_nvidia_smi
) -> tuple[Gpu, ...]:
    """This machine's GPUs: NVML's list, else ``nvidia-smi``'s, else none."""
    lib = nvml()
    if lib is not None:
        try:
            return gpus_from_nvml(lib)
        except Exception as exc:  # an NVMLError midway: fall back to nvidia-smi
            log.debug("NVML could not list the GPUs: %s", exc)
    return smi() or ()


def visible(gpus: Sequence[Gpu], environ: Mapping[str, str]) -> tuple[Gpu, ...]:
    """The GPUs a process with ``environ`` may use, in CUDA's order: ``CUDA_VISIBLE_DEVICES`` lists indices or
    UUIDs (unset: all; empty or an unknown entry: none from there on, as CUDA reads it)."""
    listed = environ.get(VISIBLE_ENV)
    if listed is None:
        return tuple(gpus)
    out: list[Gpu] = []
    for entry in (e.strip() for e in listed.split(",")):
        found = next((g for g in gpus if entry and (str(g.index) == entry or (g.uuid and g.uuid == entry))), None)
        if found is None:
            break
        out.append(found)
    return tuple(out)
