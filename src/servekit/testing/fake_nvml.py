"""A stand-in for ``pynvml`` (the ``nvidia-ml-py`` package) describing GPUs that are not there, so the code that
reads NVML is tested on machines without a card. It answers the calls servekit makes with pynvml's shapes: a
``memory`` object with ``total``/``used``/``free`` bytes, a ``utilization`` object with ``gpu``/``memory`` percent."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class FakeMemory:
    total: int
    used: int = 0

    @property
    def free(self) -> int:
        return self.total - self.used


@dataclass
class FakeUtilization:
    gpu: int = 0  # percent of the last sample period a kernel ran
    memory: int = 0  # percent of the period device memory was read or written


@dataclass
class FakeGpu:
    name: str = "Tesla T4"
    memory_total: int = 16 * 2**30
    memory_used: int = 0
    utilization: int = 0
    uuid: str = ""


class FakeNvmlError(Exception):
    """What pynvml raises (``NVMLError``) for a call on a handle that is not there."""


class FakeNvml:
    """``pynvml``'s module functions over ``gpus``; change a ``FakeGpu``'s fields to change what it reports."""

    def __init__(self, gpus: list[FakeGpu]) -> None:
        self.gpus = gpus
        self.initialised = 0

    def nvmlInit(self) -> None:  # pynvml's names, camelCase
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.initialised -= 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        if not 0 <= index < len(self.gpus):
            raise FakeNvmlError(f"Invalid Argument: no GPU {index}")
        return self.gpus[index]

    def nvmlDeviceGetName(self, handle: FakeGpu) -> str:
        return handle.name

    def nvmlDeviceGetUUID(self, handle: FakeGpu) -> str:
        return handle.uuid or f"GPU-fake-{self.gpus.index(handle)}"

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu) -> FakeMemory:
        return FakeMemory(handle.memory_total, handle.memory_used)

    def nvmlDeviceGetUtilizationRates(self, handle: FakeGpu) -> FakeUtilization:
        return FakeUtilization(handle.utilization, 0)
