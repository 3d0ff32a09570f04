"""``servekit recommend``: measure a model on instances of each type's envelope and recommend type, count, batching
and cost (``servekit.tools.recommend``)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import typer

from servekit.errors import ConfigError


def _opt(*names: str, help: str) -> Any:
    dashed = [n.replace("_", "-") for n in names if "_" in n]
    return typer.Option(*names, *dashed, help=help)


def recommend(
    model: Annotated[Path, _opt("--model", help="Model base directory (<dir>/<version>/...).")],
    instance_types: Annotated[str, _opt("--instance-types", help="Types to try, e.g. ml.c5.large,ml.m5.xlarge.")],
    target_qps: Annotated[float, _opt("--target-qps", help="Requests/s the fleet must serve (Q).")],
    p99_ms: Annotated[float, _opt("--p99-ms", help="Latency SLO: p99 at or under this many ms.")],
    payload: Annotated[
        str | None,
        _opt(
            "--payload",
            help="Request bodies, one per line, or PY_FILE:FUNCTION called for each request's body (fresh ids and "
            "times, as servekit bench --payload); else generated from the signature.",
        ),
    ] = None,
    content_type: Annotated[str, _opt("--content-type", help="Payload type: application/json or text/csv.")] = (
        "application/json"
    ),
    phases: Annotated[
        str | None, _opt("--phases", help="Offered rates to try, e.g. 50,100,200 (default: search for R_max).")
    ] = None,
    phase_duration: Annotated[str, _opt("--phase-duration", help="Length of each load phase, e.g. 5s.")] = "5s",
    batching: Annotated[
        str, _opt("--batching", help="Settings to try: off and/or MAX_BATCH_SIZE:TIMEOUT_MICROS.")
    ] = "off,8:1000,32:4000",
    concurrency: Annotated[
        str, _opt("--concurrency", help="Closed-loop clients for throughput vs concurrency.")
    ] = "1,2,4,8,16",
    utilization: Annotated[float, _opt("--utilization", help="Target utilisation U of each instance.")] = 0.7,
    percentile: Annotated[str, _opt("--percentile", help="SLO percentile: p99 (default) or p95.")] = "p99",
    max_trials: Annotated[int, _opt("--max-trials", help="Most search phases per setting.")] = 8,
    reserve_cpus: Annotated[int, _opt("--reserve-cpus", help="CPUs kept for the load generator.")] = 1,
    model_name: Annotated[str | None, _opt("--model-name", help="Name to serve it under (default: dir name).")] = None,
    instance_types_file: Annotated[
        str | None, _opt("--instance-types-file", help="Your own types (YAML/TOML), merged over the bundled ones.")
    ] = None,
    out: Annotated[Path, _opt("--out", help="Report directory (recommendations.json, report.html).")] = Path(
        "recommend-report"
    ),
    quiet: Annotated[bool, _opt("--quiet", help="No progress lines.")] = False,
) -> None:
    """Recommend an instance type, instance count, batching setting and cost, measured on real instances.

    For each type, servekit serve runs inside its envelope (vCPUs, memory) and load phases find R_max, the highest
    rate within the latency SLO. N = ceil(Q / (U x R_max)); cost per 1,000 inferences = N x price / (Q x 3.6).
    Writes recommendations.json (SageMaker's InferenceRecommendations shape) and report.html under --out.
    """
    from servekit.services.hosting.instance_types import load_instance_types
    from servekit.tools.bench.dynamic import is_payload_function
    from servekit.tools.bench.spec import parse_duration, parse_levels
    from servekit.tools.bench.workload import BenchError
    from servekit.tools.recommend.run import recommend as run_recommend
    from servekit.tools.recommend.spec import RecommendSpec, check_model_dir, parse_batching

    try:
        model_dir = check_model_dir(str(model))
        if payload is not None and is_payload_function(payload):  # PY_FILE:FUNCTION: the file made absolute
            file, _, function = payload.rpartition(":")
            if not Path(file).is_file():
                raise ConfigError(f"--payload {payload}: no such file {file}")
            payload = f"{Path(file).resolve()}:{function}"
        elif payload is not None and not Path(payload).is_file():
            raise ConfigError(f"--payload {payload}: no such file")
        spec = RecommendSpec(
            model_dir=model_dir,
            model_name=model_name or Path(model_dir).name,
            instance_types=tuple(t.strip() for t in instance_types.split(",") if t.strip()),
            target_qps=target_qps,
            slo_ms=p99_ms,
            slo_percentile=percentile,
            utilization=utilization,
            payload=payload if payload is None or is_payload_function(payload) else str(Path(payload).resolve()),
            content_type=content_type,
            rates=parse_levels(phases) if phases else (),
            concurrency=tuple(int(c) for c in parse_levels(concurrency)),
            batching=parse_batching(batching),
            phase_s=parse_duration(phase_duration),
            max_trials=max_trials,
            reserve_cpus=reserve_cpus,
        )
        table = load_instance_types(instance_types_file)

        def progress(line: str) -> None:
            if not quiet:
                typer.echo(line, err=True)

        report = asyncio.run(run_recommend(spec, table, out, progress))
    except ConfigError as exc:
        typer.echo(f"servekit: {exc}", err=True)
        raise typer.Exit(2) from None
    except BenchError as exc:
        typer.echo(f"servekit: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(summary(report))
    typer.echo(f"\nwrote {out / 'recommendations.json'} and {out / 'report.html'}")


def summary(report: dict[str, object]) -> str:
    """The ranked table as plain text (what the recommendation says, without opening the report)."""
    from servekit.tools.recommend.text import table_text

    return table_text(report)
