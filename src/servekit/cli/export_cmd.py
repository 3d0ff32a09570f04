"""``servekit export``: an endpoint of a running ``servekit up`` as Kubernetes manifests, and the image they run.

- ``servekit export k8s --endpoint NAME``: reads the endpoint through the public API (DescribeEndpoint,
  DescribeEndpointConfig, DescribeModel; Application Auto Scaling's scalable targets and policies) and writes a
  ConfigMap, a Deployment per variant, Services, an HPA per autoscaled variant (and with ``--gateway`` an HTTPRoute
  that weights the variants), or with ``--format kserve`` a KServe InferenceService; YAML to ``--output`` (a
  folder, or ``-`` for standard output). What the export cannot carry is printed as warnings on stderr.
- ``servekit export image-context DIR``: a Dockerfile (and the local models to bake in) for the image.
- ``servekit export fetch-model URL DIR``: what the manifests' init container runs: a ModelDataUrl (``s3://``
  archive or folder) becomes a servekit model base in DIR, exactly as ``servekit up`` resolves it.

Errors print one line, ``servekit: ...``: exit 1 for the API's, 2 for flags and what cannot be exported.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from servekit.cli.hosting_cmd import DEFAULT_URL, HomeOpt, UrlOpt, _api_errors, _client, _fail

export_app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help=(
        "Run an endpoint on Kubernetes: its manifests (servekit export k8s --endpoint NAME), the image they run "
        "(image-context DIR), and the init step that fetches model data in a pod (fetch-model)."
    ),
)

NAMESPACE = "sagemaker"


class Format(StrEnum):
    plain = "plain"
    kserve = "kserve"


def describe_endpoint(url: str, home: Path | None, name: str) -> dict[str, Any]:
    """Every API answer an export reads, keyed by operation: the endpoint, its config, its models, and its
    scalable targets, scaling policies and scheduled actions."""
    sm = _client("sagemaker", url, home)
    aas = _client("application-autoscaling", url, home)
    prefix = f"endpoint/{name}/variant/"
    with _api_errors(url):
        endpoint = sm.describe_endpoint(EndpointName=name)
        config = sm.describe_endpoint_config(EndpointConfigName=endpoint["EndpointConfigName"])
        models = {
            v["ModelName"]: sm.describe_model(ModelName=v["ModelName"])
            for v in config.get("ProductionVariants") or []
            if v.get("ModelName")  # an IC-based variant names none (endpoint_spec refuses it with the reason)
        }
        targets = [
            t
            for t in aas.describe_scalable_targets(ServiceNamespace=NAMESPACE)["ScalableTargets"]
            if t["ResourceId"].startswith(prefix)
        ]
        policies = [
            p
            for p in aas.describe_scaling_policies(ServiceNamespace=NAMESPACE)["ScalingPolicies"]
            if p["ResourceId"].startswith(prefix)
        ]
        scheduled = [
            s
            for s in aas.describe_scheduled_actions(ServiceNamespace=NAMESPACE)["ScheduledActions"]
            if s["ResourceId"].startswith(prefix)
        ]
    return {
        "DescribeEndpoint": endpoint,
        "DescribeEndpointConfig": config,
        "DescribeModel": models,
        "DescribeScalableTargets": targets,
        "DescribeScalingPolicies": policies,
        "DescribeScheduledActions": scheduled,
    }


def _envelopes(instance_types_file: str | None) -> dict[str, Any]:
    from servekit.errors import ConfigError
    from servekit.services.hosting.instance_types import load_instance_types
    from servekit.tools.export import Envelope

    try:
        table = load_instance_types(instance_types_file)
    except ConfigError as exc:
        raise _fail(str(exc), code=2) from None
    return {t.name: Envelope(t.vcpus, t.memory_gib, t.gpus) for t in table}


@export_app.command("k8s")
def k8s(
    endpoint: Annotated[str, typer.Option("--endpoint", help="The endpoint to export.")],
    image: Annotated[
        str | None, typer.Option("--image", help="Container image (default servekit:<version>, see image-context).")
    ] = None,
    fmt: Annotated[Format, typer.Option("--format", help="plain (Deployments, Services, HPAs) or kserve.")] = (
        Format.plain
    ),
    output: Annotated[
        str, typer.Option("--output", help="Folder to write <endpoint>.yaml into, or - for standard output.")
    ] = "-",
    namespace: Annotated[str | None, typer.Option("--namespace", help="metadata.namespace of every object.")] = None,
    gateway: Annotated[
        str | None,
        typer.Option("--gateway", help="Gateway API parent (NAME or NAMESPACE/NAME): adds an HTTPRoute by weight."),
    ] = None,
    aws_secret: Annotated[
        str | None,
        typer.Option("--aws-secret", help="Secret with AWS_* keys for s3:// data (default <endpoint>-aws; optional)."),
    ] = None,
    instance_types: Annotated[
        str | None, typer.Option("--instance-types", help="The instance types file servekit up was started with.")
    ] = None,
    url: UrlOpt = DEFAULT_URL,
    home: HomeOpt = None,
) -> None:
    """Write Kubernetes manifests that reproduce an endpoint: replicas, resources, autoscaling, probes, model data."""
    from servekit.services.hosting.capture import capture_args
    from servekit.tools.export import (
        ExportError,
        ExportOptions,
        endpoint_spec,
        kserve_manifests,
        kubernetes_manifests,
        to_yaml,
    )

    envelopes = _envelopes(instance_types)
    try:
        options = ExportOptions(
            **({"image": image} if image is not None else {}),
            namespace=namespace,
            gateway=gateway,
            aws_secret=aws_secret,
        )
    except ExportError as exc:
        raise _fail(str(exc), code=2) from None
    described = describe_endpoint(url, home, endpoint)
    try:
        spec = endpoint_spec(
            described["DescribeEndpoint"],
            described["DescribeEndpointConfig"],
            described["DescribeModel"],
            envelopes,
            described["DescribeScalableTargets"],
            described["DescribeScalingPolicies"],
            capture_flags=capture_args,
        )
        manifests = kubernetes_manifests(spec, options) if fmt is Format.plain else kserve_manifests(spec, options)
    except ExportError as exc:
        raise _fail(str(exc), code=2) from None
    warnings = list(manifests.warnings)
    for action in described["DescribeScheduledActions"]:
        warnings.append(f"scheduled action {action['ScheduledActionName']} is not mirrored (no Kubernetes built-in)")
    for warning in warnings:
        typer.echo(f"servekit: warning: {warning}", err=True)
    text = to_yaml(manifests.documents)
    if output == "-":
        sys.stdout.write(text)
        return
    folder = Path(output)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / (f"{endpoint}.yaml" if fmt is Format.plain else f"{endpoint}.kserve.yaml")
    target.write_text(text)
    kinds = ", ".join(f"{d['kind']}/{d['metadata']['name']}" for d in manifests.documents)
    typer.echo(f"wrote {target}: {kinds}")


def _model_pairs(items: list[str] | None) -> list[tuple[str, str]]:
    pairs = []
    for item in items or []:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise _fail(f"--model takes NAME=PATH (the ModelName and its ModelDataUrl), got {item!r}", code=2)
        pairs.append((name, path))
    return pairs


@export_app.command("image-context")
def image_context(
    directory: Annotated[Path, typer.Argument(help="Build context to write (created if missing).")],
    base_image: Annotated[str, typer.Option("--base-image", help="Python base image.")] = "python:3.11-slim",
    extras: Annotated[
        str, typer.Option("--extras", help="servekit extras to install, comma-separated (e.g. s3,sklearn).")
    ] = "s3",
    wheel: Annotated[
        Path | None, typer.Option("--wheel", help="Install this servekit wheel instead of the registry's release.")
    ] = None,
    model: Annotated[
        list[str] | None,
        typer.Option("--model", help="NAME=PATH: bake a local model (ModelName=its ModelDataUrl) in (repeat)."),
    ] = None,
) -> None:
    """Write a Dockerfile (python slim, pip install servekit, ENTRYPOINT servekit serve) the manifests refer to."""
    from servekit.services.hosting.artifacts import ArtifactError, ArtifactResolver
    from servekit.tools.export import ExportError, dockerfile

    pairs = _model_pairs(model)
    extra_list = [e.strip() for e in extras.split(",") if e.strip()]
    try:
        text = dockerfile(
            base_image=base_image,
            wheel=wheel.name if wheel is not None else None,
            models=[name for name, _ in pairs],
            extras=extra_list,
        )
    except ExportError as exc:
        raise _fail(str(exc), code=2) from None
    directory.mkdir(parents=True, exist_ok=True)
    if wheel is not None:
        if not wheel.is_file():
            raise _fail(f"--wheel {wheel}: no such file", code=2)
        shutil.copy2(wheel, directory / wheel.name)
    with tempfile.TemporaryDirectory() as cache:
        resolver = ArtifactResolver(Path(cache))
        for name, path in pairs:
            try:
                base = resolver.resolve(path).base_path
            except ArtifactError as exc:
                raise _fail(exc.message, code=2) from None
            target = directory / "models" / name
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(base, target, symlinks=False)  # links into the user's folder become real files
    (directory / "Dockerfile").write_text(text)
    typer.echo(f"wrote {directory / 'Dockerfile'}; build it with: docker build -t IMAGE {directory}")


@export_app.command("fetch-model")
def fetch_model(
    model_data_url: Annotated[
        str, typer.Argument(help="The ModelDataUrl: s3://.../model.tar.gz or folder, or a path.")
    ],
    directory: Annotated[Path, typer.Argument(help="Empty folder that becomes the model base (DIR/VERSION/...).")],
) -> None:
    """Fetch a model's data into a folder as servekit up does (archives checked and unpacked; files = version 1)."""
    from servekit.services.hosting.artifacts import ArtifactError, ArtifactResolver
    from servekit.storage import Storage

    # s3:// from an S3-compatible store: the endpoint AWS's own variables name (as servekit up reads them)
    s3_endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    storage = Storage(options={"s3": {"endpoint_url": s3_endpoint}} if s3_endpoint else None)
    directory.mkdir(parents=True, exist_ok=True)
    if any(not p.name.startswith(".") for p in directory.iterdir()):
        raise _fail(f"{directory} is not empty: fetch-model fills an empty folder", code=2)
    cache = Path(tempfile.mkdtemp(dir=directory, prefix=".servekit-fetch-"))  # same filesystem: moves are renames
    try:
        base = ArtifactResolver(cache, storage=storage).resolve(model_data_url).base_path
        for entry in sorted(base.iterdir()):
            if base.resolve().is_relative_to(cache.resolve()):  # unpacked or downloaded here: move it
                os.replace(entry, directory / entry.name)
            elif entry.is_dir():  # a local model base is used in place by servekit up: copy, never move
                shutil.copytree(entry, directory / entry.name)
            else:
                shutil.copy2(entry, directory / entry.name)
    except ArtifactError as exc:
        raise _fail(exc.message, code=1) from None
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    versions = sorted(p.name for p in directory.iterdir() if not p.name.startswith("."))
    typer.echo(f"fetched {model_data_url} into {directory} (versions: {', '.join(versions)})")
