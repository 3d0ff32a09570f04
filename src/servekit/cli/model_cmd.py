"""``servekit model``: inspect a version on disk; list and describe the models of a ``servekit up``
(servekit.cli.hosting_cmd). ``servekit inspect`` stays as a hidden alias of ``servekit model inspect``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

import typer

from servekit.cli.hosting_cmd import model_describe, model_list
from servekit.errors import ConfigError
from servekit.serving.runtime.base import ListedSignatures
from servekit.types import Signature, TensorSpec, tf_dtype

model_app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Models: inspect a version on disk; list and describe the models of a servekit up.",
)
# The older spelling, registered hidden with a help of its own; servekit.cli.main lists it and builds it from here.
inspect_alias = typer.Typer(add_completion=False)


@model_app.command("inspect")
@inspect_alias.command("inspect", hidden=True, help="Alias of servekit model inspect.")
def inspect(version_dir: Annotated[Path, typer.Argument(help="A model version directory.")]) -> None:
    """Print every signature of a model version (like saved_model_cli show --all)."""
    from servekit.serving.runtime.registry import RuntimeRegistry

    try:
        servable = RuntimeRegistry().load(version_dir.resolve())
    except ConfigError as exc:
        typer.echo(f"servekit: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        typer.echo(render_signatures(servable.signatures, servable.platform))
    finally:
        servable.unload()


# ---- a version's signatures as ``saved_model_cli show --all`` prints them -------------------------------------------
def _tensor(kind: str, spec: TensorSpec) -> list[str]:
    shape = "(" + ", ".join(str(d) for d in spec.shape) + ("," if len(spec.shape) == 1 else "") + ")"
    return [
        f"    {kind}['{spec.name}'] tensor_info:",
        f"        dtype: {tf_dtype(spec.datatype)}",
        f"        shape: {shape}",
        f"        name: {spec.name}",
    ]


def render_signatures(signatures: Mapping[str, Signature], platform: str) -> str:
    if isinstance(signatures, ListedSignatures):  # a SavedModel: saved_model_cli's own listing of its map
        return f"Runtime: {platform}\n{signatures.listing}"
    lines = [f"Runtime: {platform}", "", "Model contains the following SignatureDefs:"]
    for name, sig in signatures.items():
        lines += ["", f"signature_def['{name}']:", "  The given SignatureDef contains the following input(s):"]
        for t in sig.inputs:
            lines += _tensor("inputs", t)
        lines.append("  The given SignatureDef contains the following output(s):")
        for t in sig.outputs:
            lines += _tensor("outputs", t)
        lines.append(f"  Method name is: {sig.method}")
        if sig.class_labels:
            lines.append(f"  Class labels: {', '.join(sig.class_labels)}")
        if sig.feature_names:
            lines.append(f"  Feature names: {', '.join(sig.feature_names)}")
    return "\n".join(lines)


model_app.command("list")(model_list)
model_app.command("describe")(model_describe)
