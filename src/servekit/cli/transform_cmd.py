"""``servekit transform``: batch transform jobs with SageMaker's semantics (run, status, list).

Exit codes of ``run``: 0 Completed, 3 CompletedWithErrors (records in ``*.out.errors.jsonl``), 1 Failed,
130 Stopped (Ctrl-C; run it again to resume), 2 bad flags or spec.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from servekit.errors import ConfigError

transform_app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help=(
        "Batch transform jobs with SageMaker's semantics: run (or resume) a job, show one, list them.\n\n"
        "Exit codes of run: 0 Completed, 3 CompletedWithErrors (failed records in *.out.errors.jsonl), 1 Failed, "
        "130 Stopped (Ctrl-C; run it again to resume), 2 bad flags or spec."
    ),
)

HomeOpt = Annotated[Path | None, typer.Option("--home", help="servekit home (default $SERVEKIT_HOME or ./.servekit).")]
_EXIT = {"Completed": 0, "CompletedWithErrors": 3, "Failed": 1, "Stopped": 130}


def _database_url() -> str | None:
    """``SERVEKIT_DATABASE_URL``: set by a ``servekit up --database-url`` that started this run, whose API reads
    the job from that database."""
    from servekit.state.home import resolve_database_url

    return resolve_database_url(None, os.environ)


def _home(home: Path | None) -> Path:
    """The servekit home: --home, else $SERVEKIT_HOME, else ./.servekit (the environment is read here, once)."""
    from servekit.state import resolve_home

    return resolve_home(home, os.environ)


def _abs(path: str | None) -> str | None:
    if path is None or "://" in path:
        return path
    return str(Path(path).resolve())


def _read_spec_file(path: Path) -> dict[str, Any]:
    import yaml  # only a --spec file needs it; a run from flags starts without

    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML/JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{path} must hold a mapping shaped like CreateTransformJob")
    return doc


def _put(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    if value is None:
        return
    node = doc
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value


def _env_pairs(values: list[str] | None) -> dict[str, str] | None:
    if not values:
        return None
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--env takes KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"servekit: {message}", err=True)
    return typer.Exit(code)


@transform_app.command("run")
def run(
    job_name: Annotated[
        str | None, typer.Option("--job-name", "--name", help="Job name; re-running it resumes.")
    ] = None,
    spec_file: Annotated[
        Path | None, typer.Option("--spec", help="YAML/JSON shaped like CreateTransformJob; flags override it.")
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", help="Model directory (a base: its newest version) or version directory, in process."),
    ] = None,
    endpoint_url: Annotated[
        str | None, typer.Option("--endpoint-url", help="Or any server with POST /invocations.")
    ] = None,
    input_uri: Annotated[
        str | None, typer.Option("--input", help="A file, a directory/prefix, or (--data-type) a manifest.")
    ] = None,
    data_type: Annotated[str | None, typer.Option("--data-type", help="S3Prefix (default) or ManifestFile.")] = None,
    output_path: Annotated[str | None, typer.Option("--output-path", help="Where <input>.out files go.")] = None,
    content_type: Annotated[
        str | None, typer.Option("--content-type", help="MIME type of the input (default: from file extensions).")
    ] = None,
    compression: Annotated[str | None, typer.Option("--compression", help="None or Gzip.")] = None,
    split_type: Annotated[
        str | None, typer.Option("--split-type", help="None (default), Line, RecordIO or TFRecord.")
    ] = None,
    batch_strategy: Annotated[
        str | None,
        typer.Option("--batch-strategy", help="SingleRecord or MultiRecord (default MultiRecord when split)."),
    ] = None,
    max_payload_mb: Annotated[
        int | None, typer.Option("--max-payload-mb", help="Request size limit in MiB (default 6).")
    ] = None,
    max_concurrent: Annotated[
        int | None,
        typer.Option("--max-concurrent-transforms", help="Mini-batches in flight per instance (default 1)."),
    ] = None,
    instance_count: Annotated[
        int | None, typer.Option("--instance-count", help="Instances; objects are sharded across them.")
    ] = None,
    accept: Annotated[str | None, typer.Option("--accept", help="Output MIME type (default: the input's).")] = None,
    assemble_with: Annotated[str | None, typer.Option("--assemble-with", help="None (default) or Line.")] = None,
    input_filter: Annotated[str | None, typer.Option("--input-filter", help="JSONPath of what the model gets.")] = None,
    output_filter: Annotated[str | None, typer.Option("--output-filter", help="JSONPath of what is kept.")] = None,
    join_source: Annotated[str | None, typer.Option("--join-source", help="None (default) or Input.")] = None,
    max_retries: Annotated[
        int | None, typer.Option("--max-retries", help="Retries per request (0-3, default 3).")
    ] = None,
    invocation_timeout: Annotated[
        int | None, typer.Option("--invocation-timeout", help="Seconds per request over HTTP (default 600).")
    ] = None,
    strict: Annotated[
        bool | None,
        typer.Option("--strict/--no-strict", help="SageMaker's behaviour: a failed record fails its file and the job."),
    ] = None,
    env: Annotated[list[str] | None, typer.Option("--env", help="KEY=VALUE for the model's environment.")] = None,
    engine: Annotated[str, typer.Option("--engine", help="local (process pool) or ray.")] = "local",
    ray_address: Annotated[str, typer.Option("--ray-address", help="Existing Ray cluster (default: local).")] = "",
    home: HomeOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="No live progress.")] = False,
) -> None:
    """Run a batch transform job, or resume one with the same name."""
    from rich.console import Console

    from servekit.cli.transform_display import RichProgress, summary_text
    from servekit.services.transform import JobConflict, JobStore, RunOptions, run_job, spec_from_request
    from servekit.services.transform.progress import DataLog, Tee, data_log_path
    from servekit.services.transform.spec import EngineKind

    try:
        doc = _read_spec_file(spec_file) if spec_file else {}
        _put(doc, ("TransformJobName",), job_name)
        _put(doc, ("ModelName",), _newest_version(_abs(model)))
        _put(doc, ("EndpointUrl",), endpoint_url)
        _put(doc, ("TransformInput", "DataSource", "S3DataSource", "S3Uri"), input_uri)
        _put(doc, ("TransformInput", "DataSource", "S3DataSource", "S3DataType"), data_type)
        _put(doc, ("TransformInput", "ContentType"), content_type)
        _put(doc, ("TransformInput", "CompressionType"), compression)
        _put(doc, ("TransformInput", "SplitType"), split_type)
        _put(doc, ("TransformOutput", "S3OutputPath"), output_path)
        _put(doc, ("TransformOutput", "Accept"), accept)
        _put(doc, ("TransformOutput", "AssembleWith"), assemble_with)
        _put(doc, ("TransformResources", "InstanceCount"), instance_count)
        _put(doc, ("DataProcessing", "InputFilter"), input_filter)
        _put(doc, ("DataProcessing", "OutputFilter"), output_filter)
        _put(doc, ("DataProcessing", "JoinSource"), join_source)
        _put(doc, ("ModelClientConfig", "InvocationsMaxRetries"), max_retries)
        _put(doc, ("ModelClientConfig", "InvocationsTimeoutInSeconds"), invocation_timeout)
        _put(doc, ("BatchStrategy",), batch_strategy)
        _put(doc, ("MaxPayloadInMB",), max_payload_mb)
        _put(doc, ("MaxConcurrentTransforms",), max_concurrent)
        _put(doc, ("Strict",), strict)
        _put(doc, ("Environment",), _env_pairs(env))
        s3 = doc.get("TransformInput", {}).get("DataSource", {}).get("S3DataSource", {})
        if isinstance(s3, dict) and isinstance(s3.get("S3Uri"), str):
            s3["S3Uri"] = _abs(s3["S3Uri"])
        out = doc.get("TransformOutput", {})
        if isinstance(out, dict) and isinstance(out.get("S3OutputPath"), str):
            out["S3OutputPath"] = _abs(out["S3OutputPath"])
        if isinstance(doc.get("ModelName"), str) and not doc.get("EndpointUrl"):
            doc["ModelName"] = _abs(doc["ModelName"])
        spec = spec_from_request(doc)
        kind = EngineKind(engine) if engine in {e.value for e in EngineKind} else None
        if kind is None:
            raise ConfigError(f"--engine must be local or ray, got {engine!r}")
        options = RunOptions(engine=kind, ray_address=ray_address)
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    err = Console(stderr=True)
    shown = RichProgress(err) if err.is_terminal and not quiet else None
    try:
        # the agent's log in the home too: servekit up ships it as the job's <job>/<instance-id>/data-log stream
        data_log = DataLog(data_log_path(_home(home), spec.name))
        progress = Tee(shown, data_log) if shown is not None else data_log
        try:
            with JobStore(_home(home), database_url=_database_url()) as store:
                summary = run_job(spec, store, options, progress)
        finally:
            data_log.close()  # also when the job had nothing to do or another process runs it
    except (ConfigError, JobConflict) as exc:
        raise _fail(str(exc)) from None
    typer.echo(summary_text(summary))
    raise typer.Exit(_EXIT.get(summary.status.value, 1))


def _newest_version(path: str | None) -> str | None:
    """``path`` itself, or its newest version when it is a model base (integer-named folders, as ``servekit deploy``
    and ``servekit serve`` take): both forms name a model."""
    if path is None or "://" in path:
        return path
    base = Path(path)
    versions = [d for d in base.iterdir() if d.is_dir() and d.name.isdigit()] if base.is_dir() else []
    return str(max(versions, key=lambda d: int(d.name))) if versions else path


@transform_app.command("status")
def status(
    name: Annotated[str, typer.Argument(help="Job name.")],
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    home: HomeOpt = None,
) -> None:
    """Show one job: its status, counts and every finished object."""
    from rich.console import Console

    from servekit.cli.transform_display import job_table
    from servekit.services.transform import JobStore, spec_to_request

    try:
        with JobStore(_home(home), database_url=_database_url()) as store:
            job = store.get(name)
            objects = store.objects(name) if job is not None else []
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    if job is None:
        raise _fail(f"no transform job named {name!r} in {_home(home)}", 1)
    if as_json:
        doc = {
            "TransformJobName": job.name,
            "TransformJobStatus": str(job.status),
            "FailureReason": job.failure_reason,
            "CreationTime": job.created,
            "TransformStartTime": job.started,
            "TransformEndTime": job.ended,
            "Request": spec_to_request(job.spec),
            "ObjectsTotal": job.objects_total,
            "ObjectsDone": job.objects_done,
            "ObjectsFailed": job.objects_failed,
            "Records": job.records + job.records_live,
            "Errors": job.errors,
            "Objects": [
                {
                    "Key": o.key,
                    "Status": str(o.status),
                    "Instance": o.instance,
                    "Records": o.records,
                    "Errors": o.errors,
                    "Message": o.message,
                }
                for o in objects
            ],
        }
        typer.echo(json.dumps(doc, indent=2))
        return
    Console(width=160).print(job_table(job, objects))


@transform_app.command("list")
def list_jobs(
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    home: HomeOpt = None,
) -> None:
    """List transform jobs, oldest first."""
    from rich.console import Console

    from servekit.cli.transform_display import jobs_table
    from servekit.services.transform import JobStore

    try:
        with JobStore(_home(home), database_url=_database_url()) as store:
            jobs = store.jobs()
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    if as_json:
        rows = [
            {
                "TransformJobName": j.name,
                "TransformJobStatus": str(j.status),
                "CreationTime": j.created,
                "TransformEndTime": j.ended,
                "ObjectsDone": j.objects_done,
                "ObjectsTotal": j.objects_total,
                "Records": j.records + j.records_live,
                "Errors": j.errors,
            }
            for j in jobs
        ]
        typer.echo(json.dumps(rows, indent=2))
        return
    if not jobs:
        typer.echo("no transform jobs yet")
        return
    Console(width=160).print(jobs_table(jobs))
