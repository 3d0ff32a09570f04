"""GPUUtilization and GPUMemoryUtilization per GPU instance, read through NVML (servekit.testing's fake NVML),
recorded in ``/aws/sagemaker/Endpoints`` as SageMaker publishes them (summed over the instance's GPUs, 0 to GPUs x
100) and shown to Prometheus; CPU instances and planes without NVML publish none."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.unit.services.hosting.test_utilization import TICKS, FakeProc

from servekit.accelerators.inventory import load_nvml
from servekit.accelerators.nvml import GpuReading, NvmlReader, instance_gpu_percent
from servekit.services.cloudwatch.source import MetricQuery
from servekit.services.cloudwatch.store import INSTANCE_NAMESPACE, MetricsStore
from servekit.services.database import StateDB
from servekit.services.hosting.utilization import InstanceRef, Proc, UtilizationSampler
from servekit.testing.fake_nvml import FakeGpu, FakeNvml

T0 = 2_000_000 * 60
GIB = 2**30


@pytest.fixture
def db(tmp_path: Path) -> Iterator[StateDB]:
    with StateDB.open(tmp_path / "home") as d:
        yield d


def test_readings_and_the_instance_sum() -> None:
    nvml = FakeNvml([FakeGpu(memory_used=4 * GIB, utilization=30), FakeGpu(memory_used=8 * GIB, utilization=90)])
    readings = NvmlReader(nvml).read([1, 0, 7])  # a card NVML cannot give is left out
    assert readings == {0: GpuReading(0, 30.0, 25.0), 1: GpuReading(1, 90.0, 50.0)}
    assert instance_gpu_percent(readings, (0, 1)) == (120.0, 75.0)
    assert instance_gpu_percent(readings, (1,)) == (90.0, 50.0)
    assert instance_gpu_percent(readings, ()) is None
    assert instance_gpu_percent(readings, (7,)) is None


def test_no_nvml_means_no_reader() -> None:
    assert NvmlReader.open(lambda: None) is None
    assert load_nvml() is None or isinstance(NvmlReader.open(), NvmlReader)  # nvidia-ml-py absent here: None


def test_the_sampler_publishes_gpu_metrics_of_gpu_instances_only(fake: FakeProc, db: StateDB, tmp_path: Path) -> None:
    nvml = FakeNvml([FakeGpu(utilization=40, memory_used=2 * GIB), FakeGpu(utilization=60, memory_used=12 * GIB)])
    instances = [
        InstanceRef("ep", "A", "cfg", "ep-A-1", 100, 4, None, (0,)),
        InstanceRef("ep", "A", "cfg", "ep-A-2", 200, 4, None, (1,)),
        InstanceRef("cpu", "A", "cfg2", "cpu-A-1", 300, 2, None),
    ]
    for pid in (100, 200, 300):
        fake.process(pid, (0, 0, 0, 0), 1000, [])
    clock = [float(T0)]
    store = MetricsStore(db.metrics, lambda: clock[0], resolution_s=1)
    sampler = UtilizationSampler(
        lambda: list(instances),
        store,
        proc=Proc(fake.root, ticks_per_s=TICKS),
        clock=lambda: clock[0],
        monotonic=lambda: 50.0,
        gpus=NvmlReader(nvml),
    )
    samples = {s.instance.instance_id: s for s in sampler.sample()}
    assert (samples["ep-A-1"].gpu_percent, samples["ep-A-1"].gpu_memory_percent) == (40.0, 12.5)
    assert (samples["ep-A-2"].gpu_percent, samples["ep-A-2"].gpu_memory_percent) == (60.0, 75.0)
    assert samples["cpu-A-1"].gpu_percent is None and samples["cpu-A-1"].gpu_memory_percent is None

    dims = (("EndpointName", "ep"), ("VariantName", "A"))
    for metric, average in (("GPUUtilization", 50.0), ("GPUMemoryUtilization", 43.75)):
        got = store.datapoints(MetricQuery(INSTANCE_NAMESPACE, metric, dims, 1, "Average"), T0, T0 + 1)
        assert got == [(float(T0), average)], metric
    one = (("EndpointName", "ep"), ("InstanceId", "ep-A-2"), ("VariantName", "A"))
    assert store.datapoints(MetricQuery(INSTANCE_NAMESPACE, "GPUUtilization", one, 1, "Maximum"), T0, T0 + 1) == [
        (float(T0), 60.0)
    ]
    cpu_dims = (("EndpointName", "cpu"), ("VariantName", "A"))
    assert store.datapoints(MetricQuery(INSTANCE_NAMESPACE, "GPUUtilization", cpu_dims, 1, "Average"), T0, T0 + 1) == []

    families = {m.name: m for m in sampler.collect()}
    gpu = {s.labels["instance"]: s.value for s in families["servekit_instance_gpu_utilization_percent"].samples}
    assert gpu == {"ep-A-1": 40.0, "ep-A-2": 60.0}
    mem = families["servekit_instance_gpu_memory_utilization_percent"].samples
    assert {s.labels["instance"]: s.value for s in mem} == {"ep-A-1": 12.5, "ep-A-2": 75.0}

    # the card gets busier: the next sample says so
    nvml.gpus[0].utilization = 95
    clock[0] = T0 + 1
    assert {s.instance.instance_id: s.gpu_percent for s in sampler.sample()}["ep-A-1"] == 95.0


def test_without_nvml_gpu_instances_publish_no_gpu_metrics(fake: FakeProc, db: StateDB) -> None:
    fake.process(100, (0, 0, 0, 0), 1000, [])
    store = MetricsStore(db.metrics, lambda: float(T0), resolution_s=1)
    sampler = UtilizationSampler(
        lambda: [InstanceRef("ep", "A", "cfg", "ep-A-1", 100, 4, None, (0,))],
        store,
        proc=Proc(fake.root, ticks_per_s=TICKS),
        clock=lambda: float(T0),
        monotonic=lambda: 1.0,
    )
    [s] = sampler.sample()
    assert s.gpu_percent is None
    assert {m.name: m.samples for m in sampler.collect()}["servekit_instance_gpu_utilization_percent"] == []


@pytest.fixture
def fake(tmp_path: Path) -> FakeProc:
    return FakeProc(tmp_path / "proc")
