"""Runs a ``BenchSpec``: look up the model's inputs, build the workload, drive each phase, build the report."""

from __future__ import annotations

import asyncio
import contextlib
import math
import signal
from collections.abc import Callable
from typing import Any

from rich.console import Console

from servekit.tools.bench import wrk
from servekit.tools.bench.dynamic import build_dynamic
from servekit.tools.bench.knee import Knee, LoadPoint, find_knee
from servekit.tools.bench.loop import closed_loop, open_loop
from servekit.tools.bench.progress import LiveProgress
from servekit.tools.bench.spec import BenchSpec
from servekit.tools.bench.stats import PhaseStats, Samples, build_report
from servekit.tools.bench.workload import Workload, build_workload, fetch_inputs


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed (the ``fast`` extra): a cheaper loop means more requests/s."""
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run_bench(spec: BenchSpec, progress: Console | None = None) -> dict[str, Any]:
    """Run ``spec`` to the end (or a Ctrl-C, which ends it early with what was measured); returns the report."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(run_bench_async(spec, progress))


async def run_bench_async(spec: BenchSpec, progress: Console | None = None) -> dict[str, Any]:
    target = spec.target
    static = spec.body_file or spec.payload or spec.endpoint_name
    inputs = None if static else await fetch_inputs(target, spec.model, spec.version, spec.timeout_s)
    workload = build_dynamic(spec) if spec.endpoint_name or spec.payload else build_workload(spec, inputs)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    handled = False
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # not the main thread, or Windows
        loop.add_signal_handler(signal.SIGINT, _stop_once, loop, stop)
        handled = True
    phases: list[PhaseStats] = []
    try:
        with LiveProgress(progress) as live:
            for level in spec.levels:
                if stop.is_set():
                    break
                phases.append(await _phase(spec, workload, level, stop, live))
    finally:
        if handled:
            loop.remove_signal_handler(signal.SIGINT)
    report = build_report(_target_info(spec, workload), phases, interrupted=stop.is_set())
    if len(phases) > 1:
        report["knee"] = phase_knee(phases, spec.knee_factor, spec.slo_ms).to_json()
    return report


def phase_knee(phases: list[PhaseStats], factor: float, slo_ms: float | None) -> Knee:
    """The knee over the phases: each phase's answered rate (2xx/s) and p95."""
    points = [
        LoadPoint(
            rate=p.ok / max(p.duration_s, 1e-9),
            latency_ms=(p.latency_ms or {}).get("p95", math.nan),
            failed=(p.requests - p.ok) / p.requests if p.requests else 0.0,
            label=f"c={p.concurrency}" if p.loop == "closed" else f"{p.target_rate:g}/s",
        )
        for p in phases
    ]
    return find_knee(points, factor=factor, slo_ms=slo_ms)


def _stop_once(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    """First Ctrl-C: finish the phase early and report; a second one interrupts as usual."""
    stop.set()
    loop.remove_signal_handler(signal.SIGINT)


async def _phase(
    spec: BenchSpec, workload: Workload, level: float, stop: asyncio.Event, live: LiveProgress
) -> PhaseStats:
    target = spec.target
    duration = spec.duration_s
    if spec.loop == "closed":
        concurrency = int(level)
        label = f"c={concurrency}"
        if spec.engine == "wrk":
            assert duration is not None  # BenchSpec refuses wrk without a duration
            async with live.phase(label + " (wrk)", None, duration, None):
                return await wrk.run_phase(target, workload, concurrency, duration, spec.timeout_s)
        samples = Samples()
        async with live.phase(label, samples, duration, spec.requests):
            elapsed = await closed_loop(
                target,
                workload,
                concurrency,
                samples,
                duration_s=duration,
                requests=spec.requests,
                timeout_s=spec.timeout_s,
                stop=stop,
            )
        return PhaseStats.from_samples(samples, loop="closed", duration_s=elapsed, concurrency=concurrency)
    samples = Samples()
    async with live.phase(f"{level:g}/s", samples, duration, spec.requests):
        elapsed = await open_loop(
            target,
            workload,
            level,
            samples,
            duration_s=duration,
            requests=spec.requests,
            max_outstanding=spec.max_outstanding,
            timeout_s=spec.timeout_s,
            stop=stop,
        )
    return PhaseStats.from_samples(
        samples, loop="open", duration_s=elapsed, target_rate=level, max_outstanding=spec.max_outstanding
    )


def _target_info(spec: BenchSpec, workload: Workload) -> dict[str, Any]:
    rows = set(workload.rows)
    info: dict[str, Any] = {
        "url": spec.target.url,
        "protocol": spec.protocol,
        "model": spec.model or spec.target_model or "",
        "version": spec.version,
        "method": workload.method,
        "path": workload.path,
        "engine": spec.engine,
        "loop": spec.loop,
        "rows_per_request": rows.pop() if len(rows) == 1 else sum(workload.rows) / len(workload.rows),
        "distinct_bodies": None if spec.payload else len(workload.bodies),
    }
    # InvokeEndpoint and --payload runs add what they were; a plain run's target keeps its keys (schema 1)
    extra = {
        "endpoint_name": spec.endpoint_name,
        "target_model": spec.target_model,
        "payload": spec.payload,
        "payload_bodies_per_s": workload.payload_bodies_per_s,
    }
    return {**info, **{k: v for k, v in extra.items() if v is not None}}
