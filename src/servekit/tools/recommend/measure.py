"""Measuring one instance: start a ``servekit serve`` inside an envelope (the hosting backend's way), wait until its
model serves, then drive load phases at it with ``servekit bench``'s engine while reading the instance's CPU time
and resident memory from ``/proc``."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

from servekit._utils.processes import rss_bytes
from servekit.accelerators.placement import GpuShortage
from servekit.backends.local import InstanceHandle, InstanceSpec, ReplicaBackend
from servekit.tools.bench.client import fetch
from servekit.tools.bench.dynamic import build_dynamic, is_payload_function
from servekit.tools.bench.loop import closed_loop, open_loop
from servekit.tools.bench.spec import BenchSpec, Target
from servekit.tools.bench.stats import PhaseStats, Samples
from servekit.tools.bench.workload import BenchError, Workload, build_workload, fetch_inputs
from servekit.tools.recommend.procstat import tree_cpu_seconds
from servekit.tools.recommend.sizing import Phase

RSS_SAMPLE_S = 0.1  # how often resident memory is read while a phase runs (its peak is what m is made of)
READY_POLL_S = 0.1
MAX_OUTSTANDING = 512  # open loop: more in flight than this is overload (the phase fails with drops)


class MeasureError(RuntimeError):
    """An instance could not be measured (it did not start, its model did not load, it died under load)."""


@dataclass
class Running:
    handle: InstanceHandle
    target: Target
    setup_s: float  # start to first ready answer: SageMaker's ModelSetupTime


async def start_instance(backend: ReplicaBackend, spec: InstanceSpec, timeout_s: float = 120.0) -> Running:
    """Start ``spec`` and return once ``/v2/health/ready`` answers 200; MeasureError (with the log's tail) when the
    instance exits, its model fails to load, or it is not ready in ``timeout_s``."""
    began = time.monotonic()
    try:
        handle = await backend.start(spec)
    except GpuShortage as exc:  # a GPU type on a machine without its GPUs: nothing to measure
        raise MeasureError(f"instance {spec.instance_id} {exc}") from None
    target = Target.from_url(handle.url)
    try:
        while True:
            if not backend.alive(handle):
                raise MeasureError(f"{handle.exit_reason}; last log lines:\n{backend.log_tail(handle, 8)}")
            error = await _model_error(target, spec.model_name)
            if error:
                raise MeasureError(f"the model {spec.model_name} did not load: {error}")
            with contextlib.suppress(OSError, TimeoutError):
                if (await fetch(target, "GET", "/v2/health/ready", 2.0)).status == 200:
                    return Running(handle, target, time.monotonic() - began)
            if time.monotonic() - began > timeout_s:
                raise MeasureError(f"instance {spec.instance_id} was not ready within {timeout_s:.0f} s")
            await asyncio.sleep(READY_POLL_S)  # polling another process's readiness
    except BaseException:
        await backend.stop(handle, 5.0)
        raise


async def _model_error(target: Target, model: str) -> str | None:
    """The load error TF Serving's status API reports for a version that will never serve."""
    try:
        resp = await fetch(target, "GET", f"/v1/models/{model}", 2.0)
        doc = orjson.loads(resp.body) if resp.status == 200 else {}
    except (OSError, TimeoutError, orjson.JSONDecodeError):
        return None
    statuses = doc.get("model_version_status", []) if isinstance(doc, dict) else []
    if any(s.get("state") == "AVAILABLE" for s in statuses):
        return None
    for s in statuses:
        message = (s.get("status") or {}).get("error_message")
        if s.get("state") in ("END", "ERROR") and message:
            return str(message)
    return None


async def workload_for(
    target: Target, model: str, payload: str | None, content_type: str, timeout_s: float = 30.0
) -> Workload:
    """SageMaker ``/invocations`` requests: a body function's fresh bodies (``PY_FILE:FUNCTION``, as
    ``servekit bench --payload``), the payload file's bodies, or bodies generated from the model's signature
    (BenchError, which says to pass a payload, when the model has none to generate from)."""
    function = payload if payload is not None and is_payload_function(payload) else None
    spec = BenchSpec(
        url=target.url,
        protocol="sagemaker",
        model=model,
        body_file=None if function else payload,
        csv=content_type.startswith("text/csv"),
        timeout_s=timeout_s,
        payload=function,
    )
    if function is not None:
        return build_dynamic(spec)
    inputs = None
    if payload is None:
        try:
            inputs = await fetch_inputs(target, model, None, timeout_s)
        except BenchError as exc:
            raise BenchError(f"{exc}; pass sample request bodies (--payload samples.jsonl, one per line)") from None
    return build_workload(spec, inputs)


async def _peak_rss(pid: int, peak: list[int]) -> None:
    while True:
        rss = rss_bytes(pid)
        if rss is not None and rss > peak[0]:
            peak[0] = rss
        await asyncio.sleep(RSS_SAMPLE_S)


async def run_phase(
    running: Running, workload: Workload, loop: str, level: float, duration_s: float, timeout_s: float = 10.0
) -> Phase:
    """One phase (open loop at ``level`` requests/s, or closed loop with ``level`` clients) with the instance's
    CPU seconds and peak resident memory during it."""
    pid = running.handle.pid
    samples = Samples()
    stop = asyncio.Event()
    peak = [0]
    sampler = asyncio.get_running_loop().create_task(_peak_rss(pid, peak)) if pid else None
    cpu_before = tree_cpu_seconds(pid) if pid else None
    try:
        if loop == "open":
            elapsed = await open_loop(
                running.target,
                workload,
                level,
                samples,
                duration_s=duration_s,
                requests=None,
                max_outstanding=MAX_OUTSTANDING,
                timeout_s=timeout_s,
                stop=stop,
            )
        else:
            elapsed = await closed_loop(
                running.target,
                workload,
                int(level),
                samples,
                duration_s=duration_s,
                requests=None,
                timeout_s=timeout_s,
                stop=stop,
            )
    finally:
        if sampler is not None:
            sampler.cancel()
            await asyncio.gather(sampler, return_exceptions=True)
    cpu_after = tree_cpu_seconds(pid) if pid else None
    stats = PhaseStats.from_samples(samples, loop=loop, duration_s=elapsed)
    cpu = None if cpu_before is None or cpu_after is None else max(0.0, cpu_after - cpu_before)
    return Phase(
        loop=loop,
        level=level,
        duration_s=elapsed,
        requests=stats.requests,
        ok=stats.ok,
        dropped=stats.dropped,
        latency_ms=stats.latency_ms,
        cpu_s=cpu,
        rss_peak_bytes=peak[0] or None,
    )


async def warm_up(running: Running, workload: Workload, requests: int = 50) -> int | None:
    """A few requests one at a time (first-run costs out of the way); returns the resident memory after them,
    the instance's idle footprint with the model loaded and used."""
    await closed_loop(
        running.target, workload, 1, Samples(), duration_s=None, requests=requests, timeout_s=10.0, stop=asyncio.Event()
    )
    return rss_bytes(running.handle.pid) if running.handle.pid else None


def batching_args(params_dir: Path, label: str, text: str | None) -> tuple[str, ...]:
    """``servekit serve`` flags for a batching setting (its parameters written to a file under ``params_dir``)."""
    if text is None:
        return ()
    params_dir.mkdir(parents=True, exist_ok=True)
    path = params_dir / f"batching-{label.replace(':', '-')}.txt"
    path.write_text(text)
    return ("--enable_batching", "--batching_parameters_file", str(path))
