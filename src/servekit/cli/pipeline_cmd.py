"""``servekit pipeline run|list|describe|stop|resume|policy|watch|schedule`` and ``servekit lineage``.

Runs are kept in the servekit home's state database (the home ``servekit up`` uses, so register and deploy
steps reach its API with its keys). Exit codes of ``run`` and ``resume``: 0 Succeeded, 1 Failed, 130 Stopped
(Ctrl-C or ``servekit pipeline stop``; ``resume`` continues it), 2 bad input.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from servekit.cli.api_client import DEFAULT_URL, REGION, URL_ENV, home_dir

pipeline_app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help=(
        "Pipelines: run one (a Python module:object or a YAML file), list and describe runs, stop and resume "
        "them, print each step's IAM policy, start runs when data arrives (watch) or on a cron schedule."
        "\n\nExit codes of run and resume: 0 Succeeded, 1 Failed, 130 Stopped, "
        "2 bad input."
    ),
)

HomeOpt = Annotated[
    Path | None, typer.Option("--home", help="servekit home: state, keys (default $SERVEKIT_HOME or ./.servekit).")
]
UrlOpt = Annotated[
    str,
    typer.Option(
        "--url", envvar=URL_ENV, show_envvar=False, help=f"servekit up for register/deploy steps (or ${URL_ENV})."
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]
ParamOpt = Annotated[list[str] | None, typer.Option("--param", help="A pipeline parameter, NAME=VALUE (repeat).")]
EngineOpt = Annotated[
    str, typer.Option("--engine", help="local (each step a process here) or ray (each step a Ray task).")
]
RayAddressOpt = Annotated[
    str | None,
    typer.Option("--ray-address", help="With --engine ray: the cluster (ray://host:10001); default a local Ray."),
]
_EXIT = {"Succeeded": 0, "Failed": 1, "Stopped": 130}
ENGINES = ("local", "ray")


SandboxOpt = Annotated[
    bool,
    typer.Option(
        "--sandbox",
        hidden=True,
        help="Run Function and command steps in the jobs' sandbox, importing no pipeline code here (servekit up's "
        "runs; the steps' credentials come as JSON in $SERVEKIT_STEP_ENVIRONMENT).",
    ),
]


@contextlib.contextmanager
def _engine(kind: str, address: str | None, sandbox_home: Path | None = None) -> Iterator[Any]:
    """The engine steps run on (None: the runner's local engine); a Ray started here is shut down after. With
    ``sandbox_home``, the local engine runs steps in the jobs' sandbox, hiding that home."""
    if kind not in ENGINES:
        raise _fail(f"--engine must be one of {', '.join(ENGINES)}, got {kind!r}")
    if kind == "local":
        if address is not None:
            raise _fail("--ray-address goes with --engine ray")
        yield None if sandbox_home is None else _sandboxed_engine(sandbox_home)
        return
    if sandbox_home is not None:
        raise _fail("--sandbox runs steps here: it goes with --engine local")
    from servekit.services.pipelines.engine.ray_engine import RayEngine

    engine = RayEngine(address=address)
    try:
        yield engine
    finally:
        engine.close()


def _sandboxed_engine(home: Path) -> Any:
    import orjson

    from servekit.services.pipelines.engine.local_engine import LocalEngine
    from servekit.services.pipelines.engine.step_sandbox import STEP_ENVIRONMENT, StepSandbox
    from servekit.services.training.sandbox import SandboxUnavailable, bwrap

    try:
        bwrap()
        environment = orjson.loads(os.environ.get(STEP_ENVIRONMENT) or "{}")
    except (SandboxUnavailable, orjson.JSONDecodeError) as exc:
        raise _fail(f"steps cannot run in the sandbox: {exc}") from None
    env = {k: v for k, v in os.environ.items() if k != STEP_ENVIRONMENT}
    return LocalEngine(
        env=env, sandbox=StepSandbox(home, sys.executable, {str(k): str(v) for k, v in environment.items()})
    )


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"servekit: {message}", err=True)
    return typer.Exit(code)


def _params(values: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise _fail(f"--param takes NAME=VALUE, got {item!r}")
        out[key] = value
    return out


class _ControlPlane:
    """The botocore client of ``servekit up`` for register and deploy steps, made when first needed."""

    def __init__(self, home: Path, url: str) -> None:
        self._home = home
        self._url = url.rstrip("/")

    def sagemaker(self) -> Any:
        from botocore.config import Config

        from servekit.aws import client

        if not (self._home / "credentials.json").exists():
            raise FileNotFoundError(
                f"no access keys in {self._home}: start servekit up with this home (--home) before running a "
                "pipeline that registers or deploys"
            )
        config = Config(connect_timeout=5, read_timeout=120, retries={"mode": "standard", "total_max_attempts": 2})
        return client(self._home, "sagemaker", self._url, region=REGION, config=config)


def _open(home: Path | None) -> tuple[Path, Any]:
    from servekit.services.database import StateDB
    from servekit.state import StateError
    from servekit.state.home import resolve_database_url

    root = home_dir(home)
    try:  # SERVEKIT_DATABASE_URL: a `servekit up --database-url` started this run and reads it from there
        return root, StateDB.open(root, database_url=resolve_database_url(None, os.environ))
    except StateError as exc:
        raise _fail(str(exc)) from None


def _runner(root: Path, db: Any, url: str, engine: Any = None, import_code: bool = True) -> Any:
    from servekit.services.pipelines.engine.runner import PipelineRunner

    return PipelineRunner(db, home=root, engine=engine, control=_ControlPlane(root, url), import_code=import_code)


def _report(result: Any, db: Any, as_json: bool) -> None:
    from servekit.services.pipelines.runs.views import describe_run

    run = db.pipelines.get_run(result.run_id)
    _print_run(describe_run(db.pipelines, run), as_json)
    raise typer.Exit(_EXIT.get(str(result.status), 1))


@pipeline_app.command("run")
def run_cmd(
    source: Annotated[str, typer.Argument(help="package.module:pipeline, path/file.py:pipeline, or a YAML file.")],
    param: ParamOpt = None,
    artifact_root: Annotated[
        str | None, typer.Option("--artifact-root", help="Where artifacts go (default <home>/artifacts).")
    ] = None,
    home: HomeOpt = None,
    url: UrlOpt = DEFAULT_URL,
    engine: EngineOpt = "local",
    ray_address: RayAddressOpt = None,
    run_id: Annotated[
        str | None,
        typer.Option(
            "--run-id", help="The run's id (12 lower-case letters and digits; default a new one).", hidden=True
        ),
    ] = None,
    as_json: JsonOpt = False,
    sandbox: SandboxOpt = False,
) -> None:
    """Run a pipeline in the foreground; Ctrl-C stops it (resume continues it)."""
    from servekit.services.pipelines.definition.loading import load_pipeline
    from servekit.services.pipelines.errors import PipelineError

    params = _params(param)
    if run_id is not None and not re.fullmatch(r"[a-z0-9]{1,64}", run_id):
        raise _fail(f"--run-id takes lower-case letters and digits (as a run id is), got {run_id!r}")
    root, db = _open(home)
    with db, _engine(engine, ray_address, root if sandbox else None) as step_engine:
        if run_id is not None and db.pipelines.get_run(run_id) is not None:
            raise _fail(f"run {run_id} exists already in {db.path}")
        try:
            pipeline = load_pipeline(source, import_code=not sandbox)
            runner = _runner(root, db, url, step_engine, import_code=not sandbox)
            typer.echo(f"running pipeline {pipeline.name} ...", err=True)
            result = runner.start(
                pipeline,
                source,
                artifact_root=artifact_root or str(root / "artifacts"),
                parameters=params,
                run_id=run_id,
            )
        except PipelineError as exc:
            raise _fail(str(exc)) from None
        _report(result, db, as_json)


@pipeline_app.command("resume")
def resume_cmd(
    run_id: Annotated[str, typer.Argument(help="Run id or execution ARN.")],
    home: HomeOpt = None,
    url: UrlOpt = DEFAULT_URL,
    engine: EngineOpt = "local",
    ray_address: RayAddressOpt = None,
    as_json: JsonOpt = False,
    sandbox: SandboxOpt = False,
) -> None:
    """Continue a stopped or failed run: succeeded steps keep their outputs, the others run again."""
    from servekit.services.pipelines.errors import PipelineError, RunConflict, RunNotFound

    root, db = _open(home)
    with db, _engine(engine, ray_address, root if sandbox else None) as step_engine:
        try:
            result = _runner(root, db, url, step_engine, import_code=not sandbox).resume(run_id)
        except (PipelineError, RunConflict, RunNotFound) as exc:
            raise _fail(str(exc)) from None
        _report(result, db, as_json)


@pipeline_app.command("list")
def list_cmd(
    pipeline: Annotated[str | None, typer.Option("--pipeline", help="Only this pipeline's runs.")] = None,
    limit: Annotated[int, typer.Option("--limit", help="Newest runs shown.")] = 50,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Runs, newest first."""
    from servekit.services.pipelines.runs.views import run_summary

    _, db = _open(home)
    with db:
        rows = [run_summary(r) for r in db.pipelines.list_runs(pipeline=pipeline, max_results=limit).items]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        typer.echo("no pipeline runs")
        return
    typer.echo(f"{'RUN':<14} {'PIPELINE':<24} {'STATUS':<10} {'STARTED':<21} REASON")
    for r in rows:
        typer.echo(
            f"{r['PipelineExecutionId']:<14} {r['PipelineName']:<24} {r['PipelineExecutionStatus']:<10} "
            f"{r['CreationTime']:<21} {r['FailureReason']}"
        )


def _print_run(doc: dict[str, Any], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(doc, indent=2))
        return
    typer.echo(f"run        {doc['PipelineExecutionId']}  ({doc['PipelineExecutionArn']})")
    typer.echo(f"pipeline   {doc['PipelineName']}")
    typer.echo(f"status     {doc['PipelineExecutionStatus']}")
    if doc["FailureReason"]:
        typer.echo(f"reason     {doc['FailureReason']}")
    typer.echo(f"started    {doc['CreationTime']}   ended {doc['EndTime'] or '-'}")
    typer.echo(f"parameters {json.dumps(doc['Parameters'])}")
    typer.echo(f"artifacts  {doc['ArtifactRoot']}")
    typer.echo("")
    for s in doc["Steps"]:
        if s["StepStatus"] is None:
            typer.echo(f"  {s['StepName']:<22} {s['StepType']:<14} {'-':<10} {s['Note']}")
            continue
        extra = ""
        if "CacheHitResult" in s:
            extra = f"cached from {s['CacheHitResult'].get('SourcePipelineExecutionArn', '')}"
        elif s["Metadata"].get("Condition"):
            extra = f"outcome {s['Metadata']['Condition']['Outcome']}"
        elif s["Metadata"].get("RegisterModel"):
            extra = s["Metadata"]["RegisterModel"]["Arn"]
        typer.echo(
            f"  {s['StepName']:<22} {s['StepType']:<14} {s['StepStatus']:<10} attempts {s['AttemptCount']} {extra}"
        )
        for name, out in s["Outputs"].items():
            typer.echo(f"      output {name}: {out['uri']}  sha256 {out['sha256'][:16]}")
        if s["FailureReason"]:
            typer.echo(f"      reason: {s['FailureReason']}")


@pipeline_app.command("describe")
def describe_cmd(
    run_id: Annotated[str, typer.Argument(help="Run id or execution ARN.")],
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A run: its status and reason, and each step's status, attempts, outputs and reason."""
    from servekit.services.pipelines.runs.views import describe_run

    _, db = _open(home)
    with db:
        run = db.pipelines.get_run(run_id)
        if run is None:
            raise _fail(f"no pipeline run {run_id!r} in {db.path}", 1)
        doc = describe_run(db.pipelines, run)
    _print_run(doc, as_json)


@pipeline_app.command("stop")
def stop_cmd(
    run_id: Annotated[str, typer.Argument(help="Run id or execution ARN.")],
    home: HomeOpt = None,
) -> None:
    """Stop a run: its process kills the running steps (Stopping, then Stopped); resume continues it."""
    from servekit.services.pipelines.errors import RunConflict, RunNotFound
    from servekit.services.pipelines.runs.store import RunStore

    _, db = _open(home)
    with db:
        try:
            status = RunStore(db).request_stop(run_id)
        except (RunConflict, RunNotFound) as exc:
            raise _fail(str(exc), 1) from None
    typer.echo(f"run {run_id}: {status}")


@pipeline_app.command("policy")
def policy_cmd(
    pipeline: Annotated[
        str, typer.Argument(help="A pipeline source (module:object, file.py:object, YAML) or the name of one run here.")
    ],
    artifact_root: Annotated[
        str, typer.Option("--artifact-root", help="The s3:// artifact root the pipeline will run with.")
    ] = "s3://ARTIFACT-BUCKET/pipelines",
    param: ParamOpt = None,
    home: HomeOpt = None,
) -> None:
    """Print each step's AWS IAM policy document: s3:GetObject on its read prefixes, s3:PutObject on its own."""
    from servekit.services.pipelines.access.policy import policies
    from servekit.services.pipelines.definition.loading import YAML_SUFFIXES, load_pipeline
    from servekit.services.pipelines.errors import PipelineError

    source = pipeline
    if ":" not in pipeline and not pipeline.endswith(YAML_SUFFIXES):  # a name: the source of its newest run
        _, db = _open(home)
        with db:
            runs = db.pipelines.list_runs(pipeline=pipeline, max_results=1).items
        if not runs:
            raise _fail(f"no run of a pipeline named {pipeline!r} in this home: give its source instead")
        source = runs[0].source
    try:
        docs = policies(load_pipeline(source), artifact_root, _params(param))
    except PipelineError as exc:
        raise _fail(str(exc)) from None
    out = {p.step: p.document for p in docs}
    typer.echo(json.dumps(out, indent=2))
    for p in docs:
        for note in p.notes:
            typer.echo(f"servekit: step {p.step}: {note}", err=True)


def lineage(
    target: Annotated[str, typer.Argument(help="An artifact (path, URI or sha256) or a model package ARN.")],
    home: HomeOpt = None,
    url: UrlOpt = DEFAULT_URL,
    as_json: JsonOpt = False,
) -> None:
    """Where an artifact or a model package came from (run, step, inputs, code hash) and which endpoints serve it."""
    from servekit.services.pipelines.runs.lineage import artifact_lineage, find_artifact, model_package_lineage

    root, db = _open(home)
    with db:
        if target.startswith("arn:") and ":model-package/" in target:
            from servekit.cli.api_client import api_errors

            with api_errors(url):
                doc = model_package_lineage(_ControlPlane(root, url).sagemaker(), db.pipelines, target)
        else:
            artifact = find_artifact(
                db.pipelines, target if "://" in target or len(target) == 64 else os.path.abspath(target)
            )
            if artifact is None:
                raise _fail(f"{target} is no artifact a pipeline run recorded in {db.path}", 1)
            doc = {"artifact": artifact_lineage(db.pipelines, artifact)}
    if as_json:
        typer.echo(json.dumps(doc, indent=2))
        return
    if "model_package_arn" in doc:
        typer.echo(f"model package {doc['model_package_arn']} ({doc['approval_status']})")
        typer.echo(f"  model data   {doc['model_data_url']}")
        typer.echo(f"  generated by {doc['generated_by'] or '-'}")
        if doc["run"]:
            typer.echo(
                f"  run          {doc['run']['run_id']} of pipeline {doc['run']['pipeline']} ({doc['run']['status']})"
            )
        for s in doc.get("steps", []):
            made = ", ".join(f"{k} {v}" for k, v in s["made"].items()) or s.get("outcome", "") or "-"
            typer.echo(f"  step         {s['step']} ({s['status']}): {made}")
        for e in doc["endpoints"]:
            typer.echo(
                f"  served by    endpoint {e['EndpointName']} ({e['EndpointStatus']}), variant {e['VariantName']}, "
                f"model {e['ModelName']} (by {e['MatchedBy']})"
            )
        if not doc["endpoints"]:
            typer.echo("  served by    no endpoint")
    if doc.get("artifact"):
        _print_artifact(doc["artifact"], 0)


def _print_artifact(node: dict[str, Any], depth: int) -> None:
    pad = "  " * depth
    typer.echo(f"{pad}artifact {node['uri']}")
    typer.echo(f"{pad}  sha256     {node['sha256']}")
    typer.echo(
        f"{pad}  produced   run {node['run_id']} of {node['pipeline']}, step {node['step']} (attempt {node['attempt']})"
    )
    typer.echo(f"{pad}  code hash  {node['code_hash'] or '-'}")
    if node["parameters"]:
        typer.echo(f"{pad}  parameters {json.dumps(node['parameters'])}")
    for item in node["inputs"]:
        typer.echo(f"{pad}  input {item['name']}: {item['uri']}  sha256 {item['sha256']}")
        if "lineage" in item:
            _print_artifact(item["lineage"], depth + 2)


def _trigger_runner(
    source: str, root: Path, db: Any, url: str, artifact_root: str | None, params: Any, engine: Any
) -> Any:
    from servekit.services.pipelines.definition.loading import load_pipeline
    from servekit.services.pipelines.triggers import TriggerRunner

    return TriggerRunner(
        _runner(root, db, url, engine),
        load_pipeline(source),
        source,
        artifact_root=artifact_root or str(root / "artifacts"),
        parameters=params,
    )


def _started(label: str, as_json: bool) -> Any:
    def report(started: Any) -> None:
        r = started.result
        if as_json:
            typer.echo(
                json.dumps(
                    {
                        label: started.key,
                        "PipelineExecutionId": r.run_id,
                        "PipelineExecutionArn": r.arn,
                        "PipelineExecutionStatus": str(r.status),
                        "FailureReason": r.failure_reason,
                    }
                )
            )
        else:
            reason = f" ({r.failure_reason})" if r.failure_reason else ""
            typer.echo(f"{label.lower()} {started.key}: run {r.run_id} {r.status}{reason}")

    return report


def _duration(text: str, flag: str) -> float:
    from servekit.errors import ConfigError
    from servekit.tools.bench.spec import parse_duration

    try:
        seconds = parse_duration(text)
    except ConfigError as exc:
        raise _fail(f"{flag}: {exc}") from None
    if seconds <= 0:
        raise _fail(f"{flag} must be positive, got {text!r}")
    return seconds


@pipeline_app.command("watch")
def watch_cmd(
    source: Annotated[str, typer.Argument(help="package.module:pipeline, path/file.py:pipeline, or a YAML file.")],
    prefix: Annotated[str, typer.Option("--prefix", help="Folder or URI whose sub-folders are partitions.")],
    marker: Annotated[
        str | None, typer.Option("--marker", help="A partition is ready once this file is in it (e.g. _SUCCESS).")
    ] = None,
    every: Annotated[str, typer.Option("--every", help="How often to look (e.g. 10s, 1m).")] = "10s",
    partition_param: Annotated[
        str, typer.Option("--partition-param", help="The pipeline parameter that receives the partition's URI.")
    ] = "Partition",
    once: Annotated[bool, typer.Option("--once", help="Look once, run what is new, exit.")] = False,
    until_idle: Annotated[bool, typer.Option("--until-idle", help="Exit after a look that started nothing.")] = False,
    param: ParamOpt = None,
    artifact_root: Annotated[
        str | None, typer.Option("--artifact-root", help="Where artifacts go (default <home>/artifacts).")
    ] = None,
    home: HomeOpt = None,
    url: UrlOpt = DEFAULT_URL,
    engine: EngineOpt = "local",
    ray_address: RayAddressOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Start one run per new partition under a prefix, exactly once (claims are kept in the state database, so a
    restarted or a second watcher never starts a partition again). Runs one at a time, in the foreground."""
    from servekit.services.pipelines.errors import PipelineError
    from servekit.services.pipelines.triggers import Watch, watch
    from servekit.storage import Storage

    params = _params(param)
    every_s = _duration(every, "--every")
    root, db = _open(home)
    with db, _engine(engine, ray_address) as step_engine:
        try:
            spec = Watch(prefix, marker, partition_param)
            trigger = _trigger_runner(source, root, db, url, artifact_root, params, step_engine)
            watch(
                trigger,
                spec,
                Storage(),
                every_s=every_s,
                once=once,
                until_idle=until_idle,
                on_start=_started("Partition", as_json),
            )
        except PipelineError as exc:
            raise _fail(str(exc)) from None
        except KeyboardInterrupt:
            raise typer.Exit(130) from None


@pipeline_app.command("schedule")
def schedule_cmd(
    source: Annotated[str, typer.Argument(help="package.module:pipeline, path/file.py:pipeline, or a YAML file.")],
    cron: Annotated[str, typer.Option("--cron", help="minute hour day-of-month month day-of-week, in UTC.")],
    once: Annotated[
        bool, typer.Option("--once", help="Run the newest fire at or before now (unless one ran it), exit.")
    ] = False,
    param: ParamOpt = None,
    artifact_root: Annotated[
        str | None, typer.Option("--artifact-root", help="Where artifacts go (default <home>/artifacts).")
    ] = None,
    home: HomeOpt = None,
    url: UrlOpt = DEFAULT_URL,
    engine: EngineOpt = "local",
    ray_address: RayAddressOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run a pipeline at each fire of a cron expression, from now on; each fire starts one run even with several
    schedulers (claims are kept in the state database)."""
    import datetime as dt

    from servekit.services.pipelines.cron import parse_cron
    from servekit.services.pipelines.errors import PipelineError
    from servekit.services.pipelines.triggers import schedule

    params = _params(param)
    root, db = _open(home)
    with db, _engine(engine, ray_address) as step_engine:
        try:
            expression = parse_cron(cron)
            trigger = _trigger_runner(source, root, db, url, artifact_root, params, step_engine)
            schedule(
                trigger,
                expression,
                now=lambda: dt.datetime.now(dt.UTC),
                once=once,
                on_start=_started("Fire", as_json),
            )
        except PipelineError as exc:
            raise _fail(str(exc)) from None
        except KeyboardInterrupt:
            raise typer.Exit(130) from None
