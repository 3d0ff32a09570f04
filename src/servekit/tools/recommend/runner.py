"""Runs a recommendation: for each instance type, for each batching setting, an instance inside the envelope and a
search for R_max; then a closed-loop sweep (throughput vs concurrency) on the best setting. Returns the
measurements; ``report`` turns them into the recommendation."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from servekit.backends.local import InstanceSpec, LocalProcessBackend
from servekit.services.hosting.instance_types import InstanceType
from servekit.tools.bench.workload import Workload
from servekit.tools.recommend.measure import (
    MeasureError,
    Running,
    batching_args,
    run_phase,
    start_instance,
    warm_up,
    workload_for,
)
from servekit.tools.recommend.sizing import Phase, Search, Slo, next_rate, r_max, slo_verdict
from servekit.tools.recommend.spec import BatchingChoice, RecommendSpec

log = logging.getLogger(__name__)

PROBE_CLIENTS_PER_VCPU = 4  # the closed-loop probe that estimates capacity (and so where the search starts)
START_FRACTION = 0.5  # the search starts at half the probe's throughput


@dataclass
class Trial:
    phase: Phase
    verdict: str | None  # None: the SLO held


@dataclass
class ConfigRun:
    """One batching setting on one instance type."""

    batching: BatchingChoice
    setup_s: float | None = None
    rss_idle: int | None = None
    probe: Phase | None = None
    trials: list[Trial] = field(default_factory=list)
    error: str | None = None

    @property
    def r_max(self) -> float | None:
        return r_max([(t.phase.level, t.verdict is None) for t in self.trials])

    @property
    def r_max_phase(self) -> Phase | None:
        best = self.r_max
        return next((t.phase for t in self.trials if t.verdict is None and t.phase.level == best), None)


@dataclass
class TypeRun:
    itype: InstanceType
    measured_vcpus: int
    cpus: tuple[int, ...] | None
    runs: list[ConfigRun] = field(default_factory=list)
    sweep: list[Phase] = field(default_factory=list)
    error: str | None = None

    @property
    def best(self) -> ConfigRun | None:
        """The setting with the highest R_max (the first listed among equals: off before batching)."""
        scored = [r for r in self.runs if r.r_max is not None]
        return max(scored, key=lambda r: r.r_max or 0.0) if scored else None


@dataclass
class Measurements:
    spec: RecommendSpec
    machine_cpus: int
    machine_memory_gib: float
    types: list[TypeRun]
    started: float
    ended: float


def measured_vcpus(vcpus: int, machine_cpus: int, reserve: int) -> int:
    """How many of the envelope's vCPUs can be measured here: what the machine has after ``reserve`` CPUs for the
    load generator (at least one)."""
    return max(1, min(vcpus, machine_cpus - reserve))


def machine_cpus() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))  # pragma: no cover - not Linux


Progress = Callable[[str], None]


async def run_recommendation(
    spec: RecommendSpec,
    types: Sequence[InstanceType],
    work_dir: Path,
    memory_gib: float,
    progress: Progress = lambda _: None,
    cpus: Sequence[int] | None = None,
) -> Measurements:
    cpus = list(cpus if cpus is not None else machine_cpus())
    backend = LocalProcessBackend(work_dir / "instances")
    started = time.time()
    out: list[TypeRun] = []
    try:
        for itype in types:
            n = measured_vcpus(itype.vcpus, len(cpus), spec.reserve_cpus)
            pinned = tuple(cpus[-n:]) if n <= len(cpus) - spec.reserve_cpus else None
            run = TypeRun(itype, n, pinned)
            out.append(run)
            await _measure_type(spec, run, backend, work_dir, progress)
    finally:
        await backend.close()
    return Measurements(spec, len(cpus), memory_gib, out, started, time.time())


async def _measure_type(
    spec: RecommendSpec, run: TypeRun, backend: LocalProcessBackend, work_dir: Path, progress: Progress
) -> None:
    itype = run.itype
    kept: tuple[ConfigRun, Running, Workload] | None = None  # the best setting so far stays up for the sweep
    for k, choice in enumerate(spec.batching):
        config = ConfigRun(choice)
        run.runs.append(config)
        params = choice.parameters_text(run.measured_vcpus) if choice.enabled else None
        ispec = InstanceSpec(
            instance_id=f"recommend-{itype.name}-{k}",
            model_name=spec.model_name,
            model_dir=spec.model_dir,
            vcpus=run.measured_vcpus,
            memory_bytes=int(itype.memory_gib * 2**30),
            cpus=run.cpus,
            gpus=itype.gpus,  # a GPU type is measured on GPUs of its own, or not at all
            extra_args=batching_args(work_dir / "batching", f"{itype.name}-{choice.label}", params),
        )
        progress(f"{itype.name}: {choice.describe()}: starting an instance ({run.measured_vcpus} vCPU)")
        try:
            running = await start_instance(backend, ispec)
        except MeasureError as exc:
            config.error = str(exc)
            progress(f"{itype.name}: {choice.describe()}: {exc}")
            continue
        config.setup_s = running.setup_s
        try:
            workload = await workload_for(running.target, spec.model_name, spec.payload, spec.content_type)
            config.rss_idle = await warm_up(running, workload)
            await _search(spec, run, config, running, workload, progress)
        except BaseException as exc:
            await backend.stop(running.handle, 5.0)
            if not isinstance(exc, Exception):
                raise
            config.error = str(exc) or type(exc).__name__
            if not backend.alive(running.handle) and running.handle.exit_reason:
                config.error = f"{config.error} ({running.handle.exit_reason})"
            progress(f"{itype.name}: {choice.describe()}: {config.error}")
            continue
        previous = kept[0].r_max if kept is not None else None
        if config.r_max is not None and (previous is None or config.r_max > previous):
            if kept is not None:
                await backend.stop(kept[1].handle, 5.0)
            kept = (config, running, workload)
        else:
            await backend.stop(running.handle, 5.0)
    if kept is None:
        errors = [c.error for c in run.runs if c.error]
        run.error = errors[0] if errors else f"no offered rate met the {spec.slo_percentile} target"
        return
    config, running, workload = kept
    progress(f"{itype.name}: throughput vs concurrency with {config.batching.describe()}")
    try:
        for level in spec.concurrency:
            run.sweep.append(await run_phase(running, workload, "closed", level, spec.phase_s))
    finally:
        await backend.stop(running.handle, 5.0)


async def _search(
    spec: RecommendSpec, run: TypeRun, config: ConfigRun, running: Running, workload: Workload, progress: Progress
) -> None:
    slo = Slo(spec.slo_percentile, spec.slo_ms)
    label = f"{run.itype.name}: {config.batching.describe()}"
    if spec.rates:
        for offered in spec.rates:
            phase = await run_phase(running, workload, "open", offered, spec.phase_s)
            config.trials.append(Trial(phase, slo_verdict(phase, slo)))
            progress(f"{label}: {_line(config.trials[-1])}")
        return
    clients = PROBE_CLIENTS_PER_VCPU * run.measured_vcpus
    config.probe = await run_phase(running, workload, "closed", clients, spec.phase_s)
    progress(f"{label}: probe with {clients} clients answered {config.probe.throughput:.1f}/s")
    if config.probe.throughput <= 0:
        raise MeasureError(f"the probe got no successful answer ({config.probe.requests} requests failed)")
    search = Search(start=max(1.0, START_FRACTION * config.probe.throughput), max_trials=spec.max_trials)
    while (rate := next_rate([(t.phase.level, t.verdict is None) for t in config.trials], search)) is not None:
        phase = await run_phase(running, workload, "open", round(rate, 1), spec.phase_s)
        config.trials.append(Trial(phase, slo_verdict(phase, slo)))
        progress(f"{label}: {_line(config.trials[-1])}")


def _line(trial: Trial) -> str:
    p = trial.phase
    lat = p.latency_ms or {}
    verdict = "meets the SLO" if trial.verdict is None else trial.verdict
    return f"{p.level:g}/s offered: {p.throughput:.1f}/s answered, p99 {lat.get('p99', float('nan')):.1f} ms: {verdict}"
