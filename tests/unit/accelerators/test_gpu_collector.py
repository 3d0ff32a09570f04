"""A serving process's GPUs in its Prometheus /metrics, through Metrics.watch and servekit.testing's fake NVML:
one series per visible GPU labelled by its CUDA and NVML indices, read at scrape time."""

from __future__ import annotations

from servekit.accelerators.inventory import Gpu
from servekit.accelerators.nvml import GpuCollector, NvmlReader
from servekit.serving.metrics import Metrics
from servekit.testing.fake_nvml import FakeGpu, FakeNvml

GIB = 2**30


def test_visible_gpus_are_rendered_at_scrape_time() -> None:
    nvml = FakeNvml([FakeGpu(), FakeGpu("NVIDIA A10G", 24 * GIB, memory_used=6 * GIB, utilization=70)])
    metrics = Metrics()
    # CUDA_VISIBLE_DEVICES=1: the process's cuda:0 is the machine's GPU 1
    metrics.watch(GpuCollector(NvmlReader(nvml), [Gpu(1, "NVIDIA A10G", 24 * GIB)]))
    text = metrics.render().decode()
    labels = 'device="cuda:0",name="NVIDIA A10G",nvml_index="1"'
    assert f"servekit_gpu_utilization_percent{{{labels}}} 70.0" in text
    assert f"servekit_gpu_memory_utilization_percent{{{labels}}} 25.0" in text
    assert 'nvml_index="0"' not in text  # a card the process does not see
    nvml.gpus[1].utilization = 5
    assert f"servekit_gpu_utilization_percent{{{labels}}} 5.0" in metrics.render().decode()
