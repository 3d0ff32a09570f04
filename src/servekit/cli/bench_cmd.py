"""``servekit bench``: load-test a model server (any protocol). ``servekit bench --…`` (the older spelling, without
``run``) is ``servekit bench run --…``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from servekit.cli.api_client import DEFAULT_URL
from servekit.errors import ConfigError


class _DefaultsToRun(TyperGroup):
    """A group whose options-first invocation runs its ``run`` command: ``servekit bench --model m`` (the older
    spelling) is ``servekit bench run --model m``."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # ctx: typer's click Context
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["run", *args]
        return super().parse_args(ctx, args)


bench_app = typer.Typer(
    cls=_DefaultsToRun,
    add_completion=False,
    no_args_is_help=True,
    help="Load-test a model server (any protocol): throughput, latency percentiles, errors.",
)


def _keys(home: Path | None) -> dict[str, str]:
    """The key InvokeEndpoint is signed with: the environment ``servekit env`` sets, else the home's admin key."""
    key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    if not (key and secret):
        from servekit.cli.api_client import credentials, home_dir

        admin = credentials(home_dir(home)).admin
        key, secret = admin.access_key_id, admin.secret_access_key
    return {"access_key_id": key, "secret_access_key": secret, "region": region}


def _opt(*names: str, help: str) -> Any:
    dashed = [n.replace("_", "-") for n in names if "_" in n]
    return typer.Option(*names, *dashed, help=help)


@bench_app.command("run")
def bench(
    model: Annotated[str, _opt("--model", help="Model to send requests to.")] = "",
    url: Annotated[
        str | None, _opt("--url", help="Server address (default :8501; with --endpoint-name $AWS_ENDPOINT_URL).")
    ] = None,
    protocol: Annotated[str, _opt("--protocol", help="tfserving, kserve or sagemaker.")] = "tfserving",
    version: Annotated[int | None, _opt("--version", help="Model version (default: the server's choice).")] = None,
    rows: Annotated[int, _opt("--rows", help="Rows (examples) per generated request.")] = 1,
    concurrency: Annotated[
        int | None, _opt("--concurrency", help="Closed loop: clients sending back-to-back (default 1).")
    ] = None,
    rate: Annotated[float | None, _opt("--rate", help="Open loop: requests/s at fixed intervals.")] = None,
    loop: Annotated[str | None, _opt("--loop", help="closed or open (default: open with --rate, else closed).")] = None,
    duration: Annotated[str | None, _opt("--duration", help="Length of the run, e.g. 10s (default 10s).")] = None,
    requests: Annotated[int | None, _opt("--requests", help="Stop after this many requests (per phase).")] = None,
    phases: Annotated[
        str | None, _opt("--phases", help="Stepped load: rates (open loop) or concurrencies (closed), e.g. 1,8,32.")
    ] = None,
    phase_duration: Annotated[str | None, _opt("--phase_duration", help="Length of each phase.")] = None,
    max_outstanding: Annotated[
        int, _opt("--max_outstanding", help="Open loop: most requests in flight; later ones are dropped.")
    ] = 1024,
    body_file: Annotated[
        str | None, _opt("--body_file", help="Request bodies, one per line, cycled (else from the signature).")
    ] = None,
    seed: Annotated[int, _opt("--seed", help="Seed of the generated request data.")] = 0,
    binary: Annotated[bool, _opt("--binary", help="KServe: send tensors with the binary extension.")] = False,
    csv: Annotated[bool, _opt("--csv", help="SageMaker: send text/csv rows instead of JSON.")] = False,
    header: Annotated[list[str] | None, _opt("--header", help="Extra request header 'Name: value' (repeat).")] = None,
    timeout: Annotated[str, _opt("--timeout", help="Longest wait for one response.")] = "30s",
    engine: Annotated[str, _opt("--engine", help="asyncio, or wrk (closed loop, duration only).")] = "asyncio",
    json_path: Annotated[Path | None, _opt("--json", help="Also write the report here (stable keys).")] = None,
    quiet: Annotated[bool, _opt("--quiet", help="No live progress (it is off anyway when not a terminal).")] = False,
    endpoint_name: Annotated[
        str | None, _opt("--endpoint-name", help="InvokeEndpoint on servekit up (signed; keys from servekit env).")
    ] = None,
    target_model: Annotated[str | None, _opt("--target-model", help="Multi-model endpoint: the model.")] = None,
    target_variant: Annotated[str | None, _opt("--target-variant", help="The production variant to call.")] = None,
    payload: Annotated[
        str | None, _opt("--payload", help="PY_FILE:FUNCTION called for each request's body (fresh ids, times).")
    ] = None,
    knee_factor: Annotated[
        float, _opt("--knee-factor", help="--phases: knee where p95 exceeds this x low-load.")
    ] = 2.0,
    slo_ms: Annotated[
        float | None, _opt("--slo-ms", help="--phases: report the highest rate with p95 under it.")
    ] = None,
    home: Annotated[
        Path | None, _opt("--home", help="servekit up's home, for its keys (else $AWS_ACCESS_KEY_ID).")
    ] = None,
) -> None:
    """Load-test a model server (any protocol): throughput, latency percentiles, errors, the server's own split.

    Also runs as servekit bench with these options (without run).

    Closed loop: --concurrency N clients send back-to-back. Open loop: --rate R requests/s, whatever the answers.

    --phases steps through rates (open) or concurrencies (closed). --json writes the report
    (servekit.tools.bench.stats).
    """
    import orjson
    from rich.console import Console

    from servekit.tools.bench.runner import run_bench
    from servekit.tools.bench.spec import spec_from_options
    from servekit.tools.bench.stats import render
    from servekit.tools.bench.workload import BenchError

    try:
        keys = _keys(home) if endpoint_name else {}
        default_url = os.environ.get("AWS_ENDPOINT_URL") or DEFAULT_URL if endpoint_name else "http://127.0.0.1:8501"
        spec = spec_from_options(
            url=url or default_url,
            protocol=protocol,
            model=model,
            version=version,
            rows=rows,
            concurrency=concurrency,
            rate=rate,
            loop=loop,
            duration=duration,
            requests=requests,
            phases=phases,
            phase_duration=phase_duration,
            max_outstanding=max_outstanding,
            body_file=body_file,
            seed=seed,
            binary=binary,
            csv=csv,
            headers=header or [],
            timeout=timeout,
            engine=engine,
            endpoint_name=endpoint_name,
            target_model=target_model,
            target_variant=target_variant,
            payload=payload,
            knee_factor=knee_factor,
            slo_ms=slo_ms,
            **keys,
        )
        err = Console(stderr=True)
        report = run_bench(spec, None if quiet or not err.is_terminal else err)
    except ConfigError as exc:
        typer.echo(f"servekit: {exc}", err=True)
        raise typer.Exit(2) from None
    except BenchError as exc:
        typer.echo(f"servekit: {exc}", err=True)
        raise typer.Exit(1) from None
    if json_path is not None:
        json_path.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
    out = Console()
    render(report, out if out.is_terminal else Console(width=160))
