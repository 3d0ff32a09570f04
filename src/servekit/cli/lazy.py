"""A command group that imports a subcommand's module only when that subcommand runs (click's "lazily loading
subcommands" pattern, on typer's group).

Building the whole ``servekit`` tree imported every command's module (hosting, autoscale, monitor, pipeline,
registry, recommend, export, ...) and had typer evaluate every command's annotations: most of the start of a
``servekit transform run``, which needs none of them. Here the top-level group holds a table, name ->
``"module:attribute"`` and the help its listing shows; only the command being run is imported and built, the way
``app.add_typer`` / ``app.command`` would have built it. tests/integration/cli/test_cli_lazy.py checks that the table's
help and the real commands' agree.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Any, ClassVar

import typer
from typer.core import TyperCommand, TyperGroup


@dataclass(frozen=True)
class Lazy:
    """One subcommand of a :class:`LazyGroup`, imported when it runs.

    ``target`` is ``"module:attribute"``: for a group, a ``typer.Typer`` (added as ``app.add_typer(it, name=name)``
    would); for a command, its function (``app.command(name)``), or a ``typer.Typer`` holding that one command
    where it is registered with options of its own (``cls=``, ``hidden=``). ``help`` is what ``--help`` lists
    for it: the first paragraph of its help.
    """

    name: str
    target: str
    help: str
    group: bool = False
    hidden: bool = False


def listed_help(command: Any) -> str:
    """What a group's help lists for ``command`` (a click command): its short help, else the first paragraph of
    its help, as typer's help renders it."""
    text = command.short_help or command.help or ""
    return inspect.cleandoc(text).split("\n\n")[0].strip()


class LazyGroup(TyperGroup):
    """A typer group whose subcommands in :attr:`lazy` are imported and built on first use.

    Until then each is a placeholder carrying its name, help and hidden flag, which is all a help listing or a
    "did you mean" suggestion reads; :meth:`get_command` swaps in the real command for anything else.
    """

    lazy: ClassVar[tuple[Lazy, ...]] = ()

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self._listing = False
        for entry in self.lazy:
            self.commands.setdefault(entry.name, _Placeholder(entry))

    def get_command(self, ctx: Any, cmd_name: str) -> Any:  # ctx: typer's click Context
        cmd = self.commands.get(cmd_name)
        if isinstance(cmd, _Placeholder) and not self._listing:
            cmd = self.commands[cmd_name] = load(cmd.entry)
        return cmd

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True  # the listing needs names and help only: import nothing
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


class _Placeholder(TyperCommand):
    """A lazy subcommand before its import: its name, its listed help and whether it is hidden."""

    def __init__(self, entry: Lazy) -> None:
        super().__init__(name=entry.name, help=entry.help, hidden=entry.hidden)
        self.entry = entry


def load(entry: Lazy) -> Any:
    """Import ``entry``'s target and build its click command as typer builds a registered one."""
    module, _, attribute = entry.target.partition(":")
    target = getattr(importlib.import_module(module), attribute)
    if isinstance(target, typer.Typer) and not entry.group:
        command = typer.main.get_command(target)  # a Typer of one command is that command
    else:
        # A throwaway parent with a callback is always a group, so its one child comes out exactly as
        # `app.add_typer(target, name=...)` / `app.command(name)(target)` on servekit's app would build it.
        parent = typer.Typer(add_completion=False)
        parent.callback()(_no_options)
        if entry.group:
            parent.add_typer(target, name=entry.name)
        else:
            parent.command(entry.name)(target)
        command = typer.main.get_group(parent).commands[entry.name]
    if command.name != entry.name:
        raise RuntimeError(f"{entry.target} builds the command {command.name!r}, listed as {entry.name!r}")
    return command


def _no_options() -> None:
    pass
