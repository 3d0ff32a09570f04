"""``servekit images ...``: the images SageMaker jobs may name, mapped to local programs (``<home>/images.yaml``).

- ``add URI --command 'PROGRAM ARGS'``: an image of your own; a job naming it runs this command in its sandbox
  (``/opt/ml`` as SageMaker's contract has it). SageMaker passes ``train`` to a training container's entrypoint:
  add it to the command if your program expects it.
- ``add URI --python PATH``: a framework image (``pytorch-training``, ...) whose scripts run with this interpreter.
- ``list``, ``remove URI``.

``URI`` is an image URI, matched exactly, or a repository name, matching any account, region and tag. ``servekit up``
reads the file at each job, so a change takes effect for the next job without a restart.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Annotated

import typer

from servekit.cli.hosting_cmd import HomeOpt, JsonOpt, _console, _print_json, _rows_table
from servekit.errors import ConfigError

images_app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Images SageMaker jobs may name, mapped to local programs or interpreters: add, list, remove.",
)

UriArg = Annotated[str, typer.Argument(help="An image URI, or a repository name (any account, region and tag).")]


def _file(home: Path | None) -> Path:
    from servekit.state.home import resolve_home

    return resolve_home(home, os.environ) / "images.yaml"


def _fail(message: str) -> typer.Exit:
    typer.echo(f"servekit: {message}", err=True)
    return typer.Exit(1)


@images_app.command("add")
def add(
    uri: UriArg,
    command: Annotated[
        str | None, typer.Option("--command", help="The program a job of this image runs (shell words).")
    ] = None,
    python: Annotated[
        str | None, typer.Option("--python", help="The interpreter a framework image's scripts run with.")
    ] = None,
    home: HomeOpt = None,
) -> None:
    """Map an image to a program of your own (--command) or a framework image to an interpreter (--python)."""
    from servekit.config.images import image_entry, load_images_file, save_images_file

    path = _file(home)
    raw: dict[str, object] = {"uri": uri}
    if command is not None:
        try:
            raw["command"] = shlex.split(command)
        except ValueError as exc:
            raise _fail(f"--command: {exc}") from None
    if python is not None:
        raw["python"] = os.path.abspath(python)
    try:
        entry = image_entry(raw, "the image")
        entries = [e for e in load_images_file(path) if e.uri != uri]
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    save_images_file(path, (*entries, entry))
    typer.echo(f"{uri}: {'runs ' + shlex.join(entry.command) if entry.command else 'scripts run with ' + str(python)}")


@images_app.command("list")
def list_images(home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """The images mapped in the home, with what each runs."""
    from servekit.config.images import load_images_file

    try:
        entries = load_images_file(_file(home))
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    rows = [e.as_dict() for e in entries]
    if as_json:
        _print_json(rows)
        return
    shown = [{"uri": r["uri"], "runs": shlex.join(r.get("command", [])), "python": r.get("python", "")} for r in rows]
    _console().print(_rows_table(shown, [("IMAGE", "uri"), ("COMMAND", "runs"), ("PYTHON", "python")]))


@images_app.command("remove")
def remove(uri: UriArg, home: HomeOpt = None) -> None:
    """Forget an image's mapping."""
    from servekit.config.images import load_images_file, save_images_file

    path = _file(home)
    try:
        entries = load_images_file(path)
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    kept = tuple(e for e in entries if e.uri != uri)
    if len(kept) == len(entries):
        raise _fail(f"no image {uri} is mapped in {path}")
    save_images_file(path, kept)
    typer.echo(f"{uri}: removed")
