"""``servekit model``: inspect a version on disk; list and describe the models of a ``servekit up``
(servekit.cli.hosting_cmd). ``servekit inspect`` stays as a hidden alias of ``servekit model inspect``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from servekit.cli.hosting_cmd import model_describe, model_list
from servekit.cli.inspect_cmd import render_signatures
from servekit.errors import ConfigError

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
    from servekit.runtime.registry import RuntimeRegistry

    try:
        servable = RuntimeRegistry().load(version_dir.resolve())
    except ConfigError as exc:
        typer.echo(f"servekit: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        typer.echo(render_signatures(servable.signatures, servable.platform))
    finally:
        servable.unload()


model_app.command("list")(model_list)
model_app.command("describe")(model_describe)
