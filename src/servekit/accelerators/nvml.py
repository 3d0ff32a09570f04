"""How busy each GPU is, read through NVML (``pynvml``, the ``nvidia-ml-py`` package of servekit's ``gpu`` extra),
and an instance's figures as SageMaker publishes them in ``/aws/sagemaker/Endpoints``: ``GPUUtilization`` and
``GPUMemoryUtilization`` summed over the instance's GPUs, so 0 to GPUs x 100."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from servekit.accelerators.inventory import Gpu, load_nvml

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GpuReading:
    index: int
    utilization_percent: float  # share of the last sample period a kernel ran (nvmlDeviceGetUtilizationRates.gpu)
    memory_used_percent: float  # used / total memory x 100 (nvmlDeviceGetMemoryInfo)


class NvmlReader:
    """Readings of the machine's GPUs by NVML index; a card NVML cannot read is left out of a reading."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml

    @classmethod
    def open(cls, load: Callable[[], Any | None] = load_nvml) -> NvmlReader | None:
        """A reader when NVML is installed and finds a driver, else None (no GPU metrics are published)."""
        nvml = load()
        return None if nvml is None else cls(nvml)

    def read(self, indices: Iterable[int]) -> dict[int, GpuReading]:
        out: dict[int, GpuReading] = {}
        for i in sorted(set(indices)):
            try:
                handle = self._nvml.nvmlDeviceGetHandleByIndex(i)
                rates = self._nvml.nvmlDeviceGetUtilizationRates(handle)
                memory = self._nvml.nvmlDeviceGetMemoryInfo(handle)
            except Exception as exc:  # pynvml.NVMLError: a card gone or not readable; the rest stand
                log.debug("NVML cannot read GPU %d: %s", i, exc)
                continue
            used = 100.0 * float(memory.used) / float(memory.total) if memory.total else 0.0
            out[i] = GpuReading(i, float(rates.gpu), used)
        return out


def instance_gpu_percent(readings: Mapping[int, GpuReading], indices: Iterable[int]) -> tuple[float, float] | None:
    """``(GPUUtilization, GPUMemoryUtilization)`` of an instance holding ``indices``: each summed over its GPUs
    (SageMaker's 0 to GPUs x 100); None when it holds none or none could be read. Pure."""
    mine = [readings[i] for i in indices if i in readings]
    if not mine:
        return None
    return sum(r.utilization_percent for r in mine), sum(r.memory_used_percent for r in mine)


class GpuCollector(Collector):
    """A serving process's GPUs in its Prometheus ``/metrics``, read at scrape time: utilization and memory used
    (percent) of each GPU it sees, labelled by its CUDA index (as ``--device cuda:N`` names it) and NVML's."""

    def __init__(self, reader: NvmlReader, gpus: Sequence[Gpu]) -> None:
        self._reader = reader
        self._gpus = tuple(gpus)

    def describe(self) -> list[Metric]:
        return []  # no fixed series: collect() runs only at scrape time

    def collect(self) -> Iterator[Metric]:
        labels = ["device", "nvml_index", "name"]
        util = GaugeMetricFamily(
            "servekit_gpu_utilization_percent", "NVML's utilization of each GPU this process sees.", labels=labels
        )
        mem = GaugeMetricFamily(
            "servekit_gpu_memory_utilization_percent",
            "Used / total memory x 100 of each GPU this process sees (every process's use of the card).",
            labels=labels,
        )
        readings = self._reader.read(g.index for g in self._gpus)
        for cuda_index, gpu in enumerate(self._gpus):
            r = readings.get(gpu.index)
            if r is not None:
                values = [f"cuda:{cuda_index}", str(gpu.index), gpu.name]
                util.add_metric(values, r.utilization_percent)
                mem.add_metric(values, r.memory_used_percent)
        yield from (util, mem)
