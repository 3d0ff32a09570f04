"""The lazy command line (servekit.cli.lazy): its table cannot drift from the commands it names, the tree it builds
one command at a time is the tree typer builds all at once, and running one command imports no other command's
module."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from servekit.cli import main
from servekit.cli.lazy import Lazy, listed_help, load

ENV = {"COLUMNS": "100", "TERMINAL_WIDTH": "100"}


@pytest.mark.parametrize("entry", main.COMMANDS, ids=[e.name for e in main.COMMANDS])
def test_the_table_says_what_the_command_says(entry: Lazy) -> None:
    command = load(entry)
    assert listed_help(command) == entry.help, f"servekit.cli.main's help for {entry.name} is stale"
    assert command.hidden == entry.hidden
    assert hasattr(command, "list_commands") == entry.group


def _eager() -> typer.Typer:
    """servekit's app as typer builds it when every command is registered up front (as main.py was written)."""
    app = typer.Typer(add_completion=False, no_args_is_help=True, help=main.app.info.help)
    app.callback()(main._root)
    for entry in main.COMMANDS:
        module, _, attribute = entry.target.partition(":")
        target = getattr(importlib.import_module(module), attribute)
        if entry.group:
            app.add_typer(target, name=entry.name)
        elif isinstance(target, typer.Typer):  # registered there with options of its own (cls=, hidden=)
            app.registered_commands.extend(target.registered_commands)
        else:
            app.command(entry.name)(target)
    return app


def _walk(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, group
    if hasattr(group, "list_commands"):
        ctx = typer.Context(group)
        for name in group.list_commands(ctx):
            yield from _walk(group.get_command(ctx, name), (*path, name))


def _shape(command: Any) -> dict[str, Any]:
    return {
        "class": type(command).__name__,
        "help": command.help,
        "short_help": command.short_help,
        "hidden": command.hidden,
        "no_args_is_help": command.no_args_is_help,
        "params": [
            (p.name, p.opts, p.secondary_opts, p.default, getattr(p, "help", None), getattr(p, "hidden", False))
            for p in command.params
        ],
    }


def test_the_lazy_tree_is_the_whole_tree() -> None:
    eager = typer.main.get_command(_eager())
    lazy = typer.main.get_command(main.app)
    eager_tree = {path: _shape(cmd) for path, cmd in _walk(eager)}
    lazy_tree = {path: _shape(cmd) for path, cmd in _walk(lazy)}
    assert list(lazy_tree) == list(eager_tree)  # the same commands, listed in the same order
    lazy_tree[()]["class"] = eager_tree[()]["class"]  # the root alone is the lazy group
    assert lazy_tree == eager_tree


def test_help_lists_the_same_with_nothing_imported() -> None:
    runner = CliRunner()
    eager = runner.invoke(_eager(), ["--help"], env=ENV, prog_name="servekit")
    lazy = runner.invoke(main.app, ["--help"], env=ENV, prog_name="servekit")
    assert eager.exit_code == lazy.exit_code == 0, eager.output + lazy.output
    assert lazy.output == eager.output


# Each command group's module, and libraries that only other commands need (the hosting API's clients, the
# servers' stacks).
OTHERS = {
    "servekit.cli.autoscale_cmd",
    "servekit.cli.bench_cmd",
    "servekit.cli.demo_cmd",
    "servekit.cli.export_cmd",
    "servekit.cli.hosting_cmd",
    "servekit.cli.model_cmd",
    "servekit.cli.monitor_cmd",
    "servekit.cli.optimize_cmd",
    "servekit.cli.pipeline_cmd",
    "servekit.cli.recommend_cmd",
    "servekit.cli.registry_cmd",
    "servekit.cli.serve_cmd",
    "servekit.cli.transform_cmd",
    "servekit.cli.up_cmd",
    "servekit.services.autoscaling",
    "servekit.aws",
    "servekit.backends",
    "servekit.services.cloudwatch",
    "servekit.edge",
    "servekit.gateway",
    "servekit.services.hosting",
    "servekit.services.registry",
    "servekit.services.monitoring",
    "servekit.services.pipelines",
    "boto3",
    "botocore",
    "requests",
    "starlette",
    "uvicorn",
    "grpc",
}

_RUN = """
import json, sys
from servekit.cli.main import main
out, sys.argv = sys.argv[1], ["servekit", *sys.argv[2:]]
try:
    main()
finally:
    with open(out, "w") as f:
        json.dump(sorted(sys.modules), f)
"""


def _modules_after(tmp_path: Path, *args: str) -> tuple[int, set[str], str]:
    """Run ``servekit ARGS`` in a fresh interpreter; its exit code, every module it imported, and its output."""
    out = tmp_path / "modules.json"
    proc = subprocess.run(
        [sys.executable, "-c", _RUN, str(out), *args], capture_output=True, text=True, timeout=120, check=False
    )
    return proc.returncode, set(json.loads(out.read_text())), proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("args", "own"),
    [
        (("--help",), set()),
        (("transform", "run", "--help"), {"servekit.cli.transform_cmd"}),
        (("serve", "--help"), {"servekit.cli.serve_cmd"}),
        (("up", "--help"), {"servekit.cli.up_cmd"}),
    ],
    ids=["servekit", "transform run", "serve", "up"],
)
def test_a_command_imports_only_its_own_module(tmp_path: Path, args: tuple[str, ...], own: set[str]) -> None:
    code, modules, output = _modules_after(tmp_path, *args)
    assert code == 0, output
    assert own <= modules
    assert not {m for m in modules if m in OTHERS - own or m.split(".")[0] in OTHERS - own}


def test_servekit_help_imports_no_numpy(tmp_path: Path) -> None:
    code, modules, output = _modules_after(tmp_path, "--help")
    assert code == 0, output
    assert "numpy" not in modules and "servekit.types" not in modules


def test_a_transform_run_reaches_the_job_without_other_commands(tmp_path: Path) -> None:
    """Past parsing: ``run`` imports servekit.services.transform and builds the job's spec before it refuses the
    engine."""
    (tmp_path / "in").mkdir()
    args = ("transform", "run", "--name", "j", "--model", str(tmp_path), "--input", str(tmp_path / "in"))
    code, modules, output = _modules_after(tmp_path, *args, "--output-path", str(tmp_path / "out"), "--engine", "nope")
    assert code == 2 and "--engine must be local or ray" in output, output
    assert "servekit.services.transform" in modules
    others = OTHERS - {"servekit.cli.transform_cmd"}
    assert not {m for m in modules if m in others or m.split(".")[0] in others}
