"""Per-instance CPU, memory and disk utilization, as CloudWatch's ``/aws/sagemaker/Endpoints`` metrics.

The numbers are pure computations over ``/proc`` counters (:class:`Proc` reads them from a root that a test can
fake): an instance is its ``servekit serve`` process and every descendant (worker processes).

- ``CPUUtilization`` = CPU seconds used by the tree between two samples / wall seconds between them x 100,
  so summed over cores: 0 to vCPUs x 100, as CloudWatch reports it. A process's CPU seconds are
  ``utime + stime + cutime + cstime`` from ``/proc/<pid>/stat``: the reaped children's time moves into their
  parent's ``cutime``/``cstime`` when they exit, so the tree's total does not drop when a worker is replaced.
- ``MemoryUtilization`` = the tree's resident memory (``VmRSS``) / the instance type's memory x 100 (the
  machine's memory when the envelope has none).
- ``DiskUtilization`` = used / total x 100 of the filesystem holding the servekit home (instances share it).
- ``GPUUtilization`` and ``GPUMemoryUtilization`` (GPU instance types, when NVML is installed: the ``gpu``
  extra) = NVML's utilization and used / total memory of each GPU the instance holds, summed over them (0 to
  GPUs x 100, as SageMaker publishes them). An instance holds its cards alone, so a card's figures are its own.

:class:`UtilizationSampler` samples every instance each ``interval_s`` (the metrics resolution, at most every
second) into the :class:`~servekit.services.cloudwatch.store.MetricsStore` with dimensions
``EndpointName``/``VariantName``
(what CloudWatch's alarms use; statistic Average over instances), plus ``InstanceId`` (as the enhanced metrics
do) and ``EndpointConfigName`` (the green fleet of a deployment), and keeps the latest sample per instance for
Prometheus (:meth:`UtilizationSampler.collect`, a ``prometheus_client`` collector).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily, Metric

from servekit._utils.background import BackgroundLoop, until_next_bucket
from servekit.accelerators.nvml import NvmlReader, instance_gpu_percent
from servekit.services.cloudwatch.metric_store import Dimensions
from servekit.services.cloudwatch.store import INSTANCE_NAMESPACE, MetricsStore

if TYPE_CHECKING:
    from servekit.services.hosting.fleet import EndpointController

log = logging.getLogger(__name__)

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class Proc:
    """Reads the ``/proc`` counters of a process tree under ``root`` (``/proc`` by default)."""

    def __init__(self, root: str | os.PathLike[str] = "/proc", ticks_per_s: int = _CLOCK_TICKS) -> None:
        self.root = Path(root)
        self.ticks_per_s = ticks_per_s

    def _read(self, *parts: str) -> str | None:
        try:
            return self.root.joinpath(*parts).read_text()
        except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError):
            return None  # a process or thread that ended meanwhile: the sample stands without it

    def children(self, pid: int) -> list[int]:
        try:
            tasks = list((self.root / str(pid) / "task").iterdir())
        except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError):
            return []
        out: list[int] = []
        for task in tasks:
            text = self._read(str(pid), "task", task.name, "children")
            out += [int(c) for c in (text or "").split()]
        return out

    def tree(self, pid: int) -> Iterator[int]:
        """``pid`` and its descendants (each once, even if /proc changes under the walk)."""
        seen: set[int] = set()
        todo = [pid]
        while todo:
            p = todo.pop()
            if p in seen:
                continue
            seen.add(p)
            yield p
            todo += self.children(p)

    def cpu_seconds(self, pid: int) -> float | None:
        """CPU seconds of the tree: None when the process itself is gone."""
        total = 0
        for i, p in enumerate(self.tree(pid)):
            ticks = stat_ticks(self._read(str(p), "stat"))
            if ticks is None:
                if i == 0:
                    return None
                continue
            total += ticks
        return total / self.ticks_per_s

    def rss_bytes(self, pid: int) -> int | None:
        """Resident memory of the tree: None when the process itself is gone."""
        total = 0
        for i, p in enumerate(self.tree(pid)):
            rss = status_rss_bytes(self._read(str(p), "status"))
            if rss is None:
                if i == 0:
                    return None
                continue
            total += rss
        return total

    def machine_memory_bytes(self) -> int | None:
        text = self._read("meminfo")
        for line in (text or "").splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
        return None


def stat_ticks(text: str | None) -> int | None:
    """``utime + stime + cutime + cstime`` (clock ticks) of a ``/proc/<pid>/stat`` line. The command name is in
    parentheses and may hold spaces and parentheses itself, so fields are counted after the last ``)``."""
    if not text or ")" not in text:
        return None
    fields = text[text.rindex(")") + 1 :].split()
    # fields[0] is field 3 (state): utime..cstime are fields 14..17
    try:
        return sum(int(f) for f in fields[11:15])
    except (ValueError, IndexError):
        return None


def status_rss_bytes(text: str | None) -> int | None:
    if text is None:
        return None
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0  # a zombie or kernel thread has no VmRSS line: no resident memory


def cpu_percent(cpu_before: float, t_before: float, cpu_now: float, t_now: float) -> float | None:
    """CPU use between two samples, summed over cores (100 = one core busy); None without elapsed time."""
    elapsed = t_now - t_before
    if elapsed <= 0:
        return None
    return max(0.0, (cpu_now - cpu_before) / elapsed * 100.0)


def memory_percent(rss_bytes: int, envelope_bytes: int | None, machine_bytes: int | None) -> float | None:
    """Resident memory as a share of the instance type's memory (the machine's when the type has none)."""
    total = envelope_bytes or machine_bytes
    if not total or total <= 0:
        return None
    return rss_bytes / total * 100.0


def disk_percent(path: str | os.PathLike[str]) -> float | None:
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return None
    return usage.used / usage.total * 100.0 if usage.total else None


@dataclass(frozen=True, slots=True)
class InstanceRef:
    """One running instance as the sampler sees it."""

    endpoint: str
    variant: str
    config_name: str
    instance_id: str
    pid: int
    vcpus: int
    memory_bytes: int | None
    gpus: tuple[int, ...] = ()  # the machine's GPUs (NVML indices) it holds


@dataclass(frozen=True, slots=True)
class Sample:
    instance: InstanceRef
    at: float  # epoch seconds
    cpu_percent: float | None  # None on an instance's first sample (no interval yet)
    memory_percent: float | None
    rss_bytes: int
    disk_percent: float | None
    gpu_percent: float | None = None  # None: a CPU instance, or no NVML to read its GPUs with
    gpu_memory_percent: float | None = None


def hosting_instances(controllers: Mapping[str, EndpointController]) -> list[InstanceRef]:
    """Every instance with a process of every endpoint (``controllers``: the orchestrator's, by endpoint), the
    fleets of a deployment under way included."""
    out: list[InstanceRef] = []
    for name, controller in list(controllers.items()):
        fleets = list(controller.fleets.values())
        if controller.deployment is not None:
            fleets += [f for f in controller.deployment.fleets.values() if all(f is not g for g in fleets)]
        for fleet in fleets:
            for inst in list(fleet.instances):
                spec, pid = inst.handle.spec, inst.handle.pid
                if pid is None:
                    continue
                out.append(
                    InstanceRef(
                        name,
                        fleet.plan.name,
                        fleet.config_name,
                        spec.instance_id,
                        pid,
                        spec.vcpus,
                        spec.memory_bytes,
                        inst.handle.gpu_indices,
                    )
                )
    return out


def hosting_variants(controllers: Mapping[str, EndpointController]) -> list[tuple[str, str, str | None]]:
    """``(endpoint, variant, endpoint config)`` of every fleet of every endpoint, a deployment's included: the
    variants whose idle periods the metrics store fills with zeros (``MetricsStore.live_variants``)."""
    out: list[tuple[str, str, str | None]] = []
    for name, controller in list(controllers.items()):
        fleets = list(controller.fleets.values())
        if controller.deployment is not None:
            fleets += [f for f in controller.deployment.fleets.values() if all(f is not g for g in fleets)]
        out += [(name, fleet.plan.name, fleet.config_name or None) for fleet in fleets]
    return out


class UtilizationSampler(BackgroundLoop):
    """Samples every instance's utilization into ``store`` each ``interval_s`` (the store's resolution by
    default, at least a second); ``start()``/``close()`` run it beside the control plane."""

    def __init__(
        self,
        instances: Callable[[], Iterable[InstanceRef]],
        store: MetricsStore,
        interval_s: float | None = None,
        proc: Proc | None = None,
        disk_path: str | os.PathLike[str] | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        gpus: NvmlReader | None = None,
    ) -> None:
        """``gpus``: reads the GPU instances' cards (``NvmlReader.open()`` where NVML is installed, else none)."""
        self._instances = instances
        self.gpus = gpus
        self.store = store
        self.interval_s = max(1.0, float(interval_s if interval_s is not None else store.resolution_s))
        self.proc = proc or Proc()
        self.disk_path = disk_path
        self.clock = clock
        self.monotonic = monotonic
        self.machine_bytes = self.proc.machine_memory_bytes()
        self._cpu: dict[str, tuple[float, float]] = {}  # instance id -> (CPU seconds, monotonic time)
        self.latest: dict[str, Sample] = {}  # instance id -> its last sample (only instances still running)

    def sample(self) -> list[Sample]:
        """One pass over the instances: record each one's utilization, forget the ones that are gone."""
        at, mono = self.clock(), self.monotonic()
        disk = disk_percent(self.disk_path) if self.disk_path is not None else None
        samples: list[Sample] = []
        refs = list(self._instances())
        held = [i for ref in refs for i in ref.gpus]
        readings = self.gpus.read(held) if self.gpus is not None and held else {}
        for ref in refs:
            cpu_s, rss = self.proc.cpu_seconds(ref.pid), self.proc.rss_bytes(ref.pid)
            if cpu_s is None or rss is None:
                continue  # its process has exited: the supervisor replaces it, there is nothing to measure
            before = self._cpu.get(ref.instance_id)
            self._cpu[ref.instance_id] = (cpu_s, mono)
            cpu = cpu_percent(before[0], before[1], cpu_s, mono) if before is not None else None
            mem = memory_percent(rss, ref.memory_bytes, self.machine_bytes)
            gpu = instance_gpu_percent(readings, ref.gpus)
            samples.append(Sample(ref, at, cpu, mem, rss, disk, *(gpu or (None, None))))
        self.latest = {s.instance.instance_id: s for s in samples}
        self._cpu = {k: v for k, v in self._cpu.items() if k in self.latest}
        for s in samples:
            self._record(s)
        return samples

    def _record(self, s: Sample) -> None:
        for dims in instance_dimensions(s.instance):
            for metric, value in (
                ("CPUUtilization", s.cpu_percent),
                ("MemoryUtilization", s.memory_percent),
                ("DiskUtilization", s.disk_percent),
                ("GPUUtilization", s.gpu_percent),
                ("GPUMemoryUtilization", s.gpu_memory_percent),
            ):
                if value is not None:
                    self.store.record(INSTANCE_NAMESPACE, metric, dims, value, s.at)

    # ---- Prometheus ----------------------------------------------------------------------------------------
    def describe(self) -> list[Metric]:
        return []  # no fixed series: the registry then calls collect() only at scrape time

    def collect(self) -> Iterator[Metric]:
        labels = ["endpoint", "variant", "endpoint_config", "instance"]
        cpu = GaugeMetricFamily(
            "servekit_instance_cpu_utilization_percent",
            "CloudWatch's CPUUtilization per instance at the last sample: CPU use of its process tree, summed over "
            "cores (0 to vCPUs x 100).",
            labels=labels,
        )
        mem = GaugeMetricFamily(
            "servekit_instance_memory_utilization_percent",
            "CloudWatch's MemoryUtilization per instance: resident memory / the instance type's memory x 100.",
            labels=labels,
        )
        rss = GaugeMetricFamily(
            "servekit_instance_memory_rss_bytes", "Resident memory of each instance's process tree.", labels=labels
        )
        vcpus = GaugeMetricFamily("servekit_instance_vcpus", "vCPUs of each instance's type.", labels=labels)
        gpu = GaugeMetricFamily(
            "servekit_instance_gpu_utilization_percent",
            "CloudWatch's GPUUtilization per GPU instance: NVML's utilization summed over its GPUs (0 to GPUs x 100).",
            labels=labels,
        )
        gpu_mem = GaugeMetricFamily(
            "servekit_instance_gpu_memory_utilization_percent",
            "CloudWatch's GPUMemoryUtilization per GPU instance: used / total memory summed over its GPUs.",
            labels=labels,
        )
        for s in list(self.latest.values()):
            i = s.instance
            values = [i.endpoint, i.variant, i.config_name, i.instance_id]
            if s.cpu_percent is not None:
                cpu.add_metric(values, s.cpu_percent)
            if s.memory_percent is not None:
                mem.add_metric(values, s.memory_percent)
            rss.add_metric(values, s.rss_bytes)
            vcpus.add_metric(values, i.vcpus)
            if s.gpu_percent is not None and s.gpu_memory_percent is not None:
                gpu.add_metric(values, s.gpu_percent)
                gpu_mem.add_metric(values, s.gpu_memory_percent)
        yield from (cpu, mem, rss, vcpus, gpu, gpu_mem)

    # ---- lifecycle -------------------------------------------------------------------------------------------
    async def run(self) -> None:
        while True:
            try:
                self.sample()
            except Exception:
                log.exception("sampling instance utilization failed")
            step = self.interval_s
            await asyncio.sleep(until_next_bucket(self.clock(), step, min(0.1, step / 10)))


def instance_dimensions(i: InstanceRef) -> list[Dimensions]:
    base = (("EndpointName", i.endpoint), ("VariantName", i.variant))
    out: list[Dimensions] = [base, tuple(sorted((*base, ("InstanceId", i.instance_id))))]
    if i.config_name:
        out.append(tuple(sorted((*base, ("EndpointConfigName", i.config_name)))))
    return out
