"""The recommendation document: per instance type the measured R_max, the resource bounds, the sizing and the costs
(``sizing`` decides each), in the shape of DescribeInferenceRecommendationsJob's ``InferenceRecommendations``
plus servekit's own detail (``types``: every phase measured, which figures are measured and which scaled).

Keys of ``types[]`` (stable; ``SCHEMA`` changes if one changes meaning): ``name``, ``vcpus``, ``memory_gib``,
``price_per_hour``, ``price_source``, ``measured_vcpus``, ``basis`` (``measured`` | ``scaled`` | ``none``),
``meets_slo``, ``reason``, ``batching`` (the best setting's label), ``r_max_measured`` and ``r_max`` (requests/s;
``r_max`` is what sizing uses), ``c_cpu_s_per_request``, ``cpu_bound_rps`` (C/c), ``m_bytes_per_rps``,
``memory_bound_rps`` (M/m), ``resource_bound_rps`` (min of the two), ``idle_rss_bytes``, ``t_s_per_request``,
``instances``, ``cost_per_hour``, ``cost_per_1k``, ``latency_ms`` (at R_max), ``setup_s``, ``rank``, ``settings``
(every batching setting tried, with its probe and trials), ``sweep`` (closed loop: concurrency → throughput).
"""

from __future__ import annotations

from typing import Any

from servekit.tools.recommend.runner import ConfigRun, Measurements, TypeRun
from servekit.tools.recommend.sizing import (
    Phase,
    Ranked,
    cost_per_1k,
    cost_per_hour,
    cpu_bound,
    instances_needed,
    memory_bound,
    per_request_cpu,
    per_request_memory,
    rank,
    resource_bound,
    scale_rate,
)
from servekit.tools.recommend.spec import BatchingChoice

SCHEMA = "servekit.recommend/1"
VARIANT = "AllTraffic"

FORMULAS = {
    "r_max": "highest offered open-loop rate (requests/s) whose phase had no failed or dropped request, answered "
    ">= 90% of the offered rate and kept the SLO percentile <= the target",
    "c": "CPU seconds of the instance's process tree during the R_max phase / requests answered in it",
    "C/c": "envelope vCPUs / c (requests/s)",
    "m": "(peak RSS during the R_max phase - idle RSS with the model loaded) / that phase's throughput: bytes per "
    "request/s of load (memory per request in flight x seconds held); none when load added < 1 MiB",
    "M/m": "(envelope memory - idle RSS) / m (requests/s)",
    "scaled": "a type with more vCPUs than could be measured here: r_max = r_max_measured x vcpus / measured_vcpus",
    "T": "1 / r_max (seconds of one instance's capacity per request)",
    "N": "ceil(Q x T / U) = ceil(Q / (U x r_max)), at least 1",
    "cost_per_hour": "N x price_per_hour",
    "cost_per_1k": "cost_per_hour / (Q x 3600) x 1000",
    "CostPerInference": "cost_per_hour / (Q x 3600)",
    "MaxInvocations": "floor(r_max x 60) per instance per minute",
}


def phase_json(p: Phase, verdict: str | None = None, with_verdict: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "loop": p.loop,
        "level": p.level,
        "duration_s": round(p.duration_s, 4),
        "requests": p.requests,
        "ok": p.ok,
        "errors": p.errors,
        "dropped": p.dropped,
        "throughput_rps": round(p.throughput, 3),
        "latency_ms": {k: round(v, 3) for k, v in p.latency_ms.items()} if p.latency_ms else None,
        "cpu_s": None if p.cpu_s is None else round(p.cpu_s, 4),
        "rss_peak_bytes": p.rss_peak_bytes,
    }
    if with_verdict:
        out["meets_slo"] = verdict is None
        out["verdict"] = verdict or "meets the SLO"
    return out


def environment_parameters(choice: BatchingChoice, vcpus: int) -> list[dict[str, str]]:
    """The batching setting in the SageMaker TensorFlow Serving container's variables (what a SageMaker
    recommendation lists); servekit serve takes the same as ``--enable_batching --batching_parameters_file``."""

    def param(key: str, value: str) -> dict[str, str]:
        return {"Key": key, "ValueType": "String", "Value": value}

    if not choice.enabled:
        return [param("SAGEMAKER_TFS_ENABLE_BATCHING", "false")]
    return [
        param("SAGEMAKER_TFS_ENABLE_BATCHING", "true"),
        param("SAGEMAKER_TFS_MAX_BATCH_SIZE", str(choice.max_batch_size)),
        param("SAGEMAKER_TFS_BATCH_TIMEOUT_MICROS", str(choice.batch_timeout_micros)),
        param("SAGEMAKER_TFS_NUM_BATCH_THREADS", str(max(1, vcpus))),
    ]


def _settings(run: ConfigRun) -> dict[str, Any]:
    return {
        "batching": run.batching.label,
        "description": run.batching.describe(),
        "r_max_rps": run.r_max,
        "setup_s": None if run.setup_s is None else round(run.setup_s, 3),
        "idle_rss_bytes": run.rss_idle,
        "error": run.error,
        "probe": phase_json(run.probe) if run.probe else None,
        "trials": [phase_json(t.phase, t.verdict, with_verdict=True) for t in run.trials],
    }


def type_figures(run: TypeRun, q: float, utilization: float) -> dict[str, Any]:
    """One type's sizing from its measurements (see ``sizing`` for each formula)."""
    t = run.itype
    best = run.best
    out: dict[str, Any] = {
        "name": t.name,
        "vcpus": t.vcpus,
        "memory_gib": t.memory_gib,
        "price_per_hour": t.price_per_hour,
        "price_source": t.source,
        "measured_vcpus": run.measured_vcpus,
        "cpus": list(run.cpus) if run.cpus else None,
        "settings": [_settings(r) for r in run.runs],
        "sweep": [phase_json(p) for p in run.sweep],
        "rank": None,
    }
    phase = best.r_max_phase if best else None
    if best is None or best.r_max is None or phase is None:
        out.update(basis="none", meets_slo=False, reason=run.error or "no offered rate met the SLO", batching=None)
        return out
    measured = best.r_max
    scaled = run.measured_vcpus < t.vcpus
    r = scale_rate(measured, t.vcpus, run.measured_vcpus) if scaled else measured
    memory_bytes = t.memory_gib * 2**30
    c = per_request_cpu(phase.cpu_s, phase.ok)
    m = per_request_memory(phase.rss_peak_bytes, best.rss_idle, phase.throughput)
    cpu_rps = cpu_bound(t.vcpus, c)
    mem_rps = memory_bound(memory_bytes, best.rss_idle, m)
    n = instances_needed(q, r, utilization)
    hourly = cost_per_hour(n, t.price_per_hour)
    cpu_util = None if phase.cpu_s is None else 100.0 * phase.cpu_s / phase.duration_s / run.measured_vcpus
    mem_util = None if phase.rss_peak_bytes is None else 100.0 * phase.rss_peak_bytes / memory_bytes
    out.update(
        basis="scaled" if scaled else "measured",
        meets_slo=True,
        reason=None,
        batching=best.batching.label,
        batching_description=best.batching.describe(),
        environment_parameters=environment_parameters(best.batching, t.vcpus),
        r_max_measured=measured,
        r_max=r,
        c_cpu_s_per_request=c,
        cpu_bound_rps=cpu_rps,
        m_bytes_per_rps=m,
        memory_bound_rps=mem_rps,
        resource_bound_rps=resource_bound(cpu_rps, mem_rps),
        idle_rss_bytes=best.rss_idle,
        t_s_per_request=1.0 / r,
        instances=n,
        cost_per_hour=hourly,
        cost_per_1k=cost_per_1k(hourly, q),
        latency_ms=phase.latency_ms,
        cpu_utilization=cpu_util,
        memory_utilization=mem_util,
        setup_s=best.setup_s,
        r_max_phase=phase_json(phase),
    )
    return out


def notes(m: Measurements, figures: list[dict[str, Any]]) -> list[str]:
    """What the reader must know to trust the figures: what was measured, what scaled, and how."""
    spec = m.spec
    out = [
        f"This machine has {m.machine_cpus} CPU(s) and {m.machine_memory_gib:.1f} GiB; {spec.reserve_cpus} CPU(s) "
        "are left to the load generator, which runs on the same machine as the instance under test and shares it "
        "with whatever else runs here.",
        f"Each phase ran {spec.phase_s:g} s; short phases make p99 noisy (a few slow requests move it).",
        "Per-instance figures (R_max, latency, c, m) are measured on one real servekit serve instance pinned to "
        "its CPUs, with model threads = its vCPUs and its memory watchdog at the envelope's memory.",
    ]
    for f in figures:
        if f.get("basis") == "scaled":
            out.append(
                f"{f['name']} has {f['vcpus']} vCPUs; it was measured on {f['measured_vcpus']}: its R_max is SCALED "
                f"x{f['vcpus'] / f['measured_vcpus']:g} (linear in vCPUs, an upper estimate that assumes nothing but "
                "CPU limits the model); its latency is the measured instance's."
            )
        elif f.get("basis") == "measured":
            out.append(f"{f['name']}: measured at full size ({f['vcpus']} vCPU(s)).")
    out.append(
        "Memory per envelope is the type's nominal memory (the watchdog enforces it); sizing uses the measured "
        "(or scaled) R_max, and min(C/c, M/m) is shown beside it as a bound from resources alone."
    )
    out.append(f"Prices: {', '.join(sorted({str(f['price_source']) for f in figures}))}.")
    return out


def build_report(m: Measurements, job_name: str = "servekit-recommend") -> dict[str, Any]:
    spec = m.spec
    q, u = spec.target_qps, spec.utilization
    figures = [type_figures(run, q, u) for run in m.types]
    ranking = rank([Ranked(f["name"], bool(f["meets_slo"]), f.get("cost_per_1k"), f.get("instances")) for f in figures])
    by_name = {f["name"]: f for f in figures}
    recommendations = []
    performances = []
    for position, name in enumerate(ranking, 1):
        f = by_name[name]
        f["rank"] = position
        recommendations.append(_recommendation(f, job_name, position, q, m))
        performances.append(
            {
                "Metrics": {
                    "MaxInvocations": int(f["r_max"] * 60),
                    "ModelLatency": round((f["latency_ms"] or {}).get(spec.slo_percentile, 0.0)),
                },
                "EndpointInfo": {"EndpointName": _endpoint_name(job_name, position)},
            }
        )
    return {
        "schema": SCHEMA,
        "model": {"name": spec.model_name, "dir": spec.model_dir, "payload": spec.payload},
        "target": {
            "qps": q,
            "slo": {"percentile": spec.slo_percentile, "ms": spec.slo_ms},
            "utilization": u,
        },
        "machine": {"cpus": m.machine_cpus, "memory_gib": round(m.machine_memory_gib, 2)},
        "phase_s": spec.phase_s,
        "started": m.started,
        "ended": m.ended,
        "formulas": FORMULAS,
        "ranking": ranking,
        "InferenceRecommendations": recommendations,
        "EndpointPerformances": performances,
        "types": figures,
        "notes": notes(m, figures),
    }


def _endpoint_name(job: str, position: int) -> str:
    return f"{job[:50]}-{position}"


def _recommendation(f: dict[str, Any], job: str, position: int, q: float, m: Measurements) -> dict[str, Any]:
    lat = f["latency_ms"] or {}
    metrics: dict[str, Any] = {
        "CostPerHour": round(f["cost_per_hour"], 6),
        "CostPerInference": f["cost_per_hour"] / (q * 3600.0),
        "MaxInvocations": int(f["r_max"] * 60),
        "ModelLatency": round(lat.get(m.spec.slo_percentile, 0.0)),
    }
    if f["cpu_utilization"] is not None:
        metrics["CpuUtilization"] = round(f["cpu_utilization"], 2)
    if f["memory_utilization"] is not None:
        metrics["MemoryUtilization"] = round(f["memory_utilization"], 2)
    if f["setup_s"] is not None:
        metrics["ModelSetupTime"] = round(f["setup_s"])
    return {
        "RecommendationId": f"{job}/{position}",
        "Metrics": metrics,
        "EndpointConfiguration": {
            "EndpointName": _endpoint_name(job, position),
            "VariantName": VARIANT,
            "InstanceType": f["name"],
            "InitialInstanceCount": f["instances"],
        },
        "ModelConfiguration": {"EnvironmentParameters": f["environment_parameters"]},
        "InvocationStartTime": m.started,
        "InvocationEndTime": m.ended,
    }
