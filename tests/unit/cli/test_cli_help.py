"""The command line a new user meets first, through typer's CliRunner: --version, help texts at 100 columns, the
``servekit NOUN VERB`` tree and the older spellings kept as aliases, serve's flag spellings."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import servekit
from servekit.cli.main import app
from servekit.config.models import ServerConfig

WIDTH = 100
# The only commands that are not NOUN VERB: `up` and `deploy` are named so by the hosting issue (`deploy` is the
# one-line path from a model directory to an InService endpoint); `optimize` and `recommend` are issue 12's
# `servekit optimize` and `servekit recommend`; `lineage` is issue 14's `servekit lineage ARTIFACT_OR_MODEL_PACKAGE`.
STANDALONE = {"serve", "up", "env", "logs", "deploy", "demo", "optimize", "recommend", "lineage"}


def invoke(*args: str, width: int = WIDTH) -> Any:
    env = {"COLUMNS": str(width), "TERMINAL_WIDTH": str(width)}
    return CliRunner().invoke(app, list(args), env=env, prog_name="servekit")


def commands(group: Any = None, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command and group under ``servekit``, hidden aliases included, with its path: asked of each group as
    the command line asks (``servekit``'s own imports each command's module on the way)."""
    group = typer.main.get_command(app) if group is None else group
    yield path, group
    if hasattr(group, "list_commands"):
        ctx = typer.Context(group)
        for name in group.list_commands(ctx):
            yield from commands(group.get_command(ctx, name), (*path, name))


ALL = list(commands())


def test_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0, result.output
    assert result.output == f"servekit {servekit.__version__}\n"
    assert invoke("--version", "serve").output == result.output  # eager: nothing else runs


def test_the_tree_is_walked() -> None:
    paths = {p for p, _ in ALL}
    assert {("serve",), ("model", "inspect"), ("bench", "run"), ("transform", "run"), ("monitor", "run")} <= paths
    assert {("deploy",), ("model", "list"), ("endpoint", "describe"), ("keys", "create")} <= paths


@pytest.mark.parametrize(("path", "cmd"), ALL, ids=[" ".join(p) or "servekit" for p, _ in ALL])
def test_help_shows_plain_text_and_every_option_name_in_full(path: tuple[str, ...], cmd: Any) -> None:
    result = invoke(*path, "--help")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "``" not in out, f"docstring markup shown literally:\n{out}"
    assert "…" not in out, f"something was cut to fit:\n{out}"
    assert max(len(line) for line in out.splitlines()) <= WIDTH
    names = [n for p in cmd.params if not getattr(p, "hidden", False) for n in (*p.opts, *p.secondary_opts)]
    for name in names:
        if name.startswith("-"):
            assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", out), f"{name} not shown in full:\n{out}"


def test_every_command_reads_noun_verb() -> None:
    for path, cmd in ALL:
        if len(path) != 1:
            continue
        name = path[0]
        if cmd.hidden or name in STANDALONE:
            continue
        subcommands = getattr(cmd, "commands", None)
        assert subcommands, f"servekit {name} is neither NOUN VERB nor one of {sorted(STANDALONE)}"
        for verb, sub in subcommands.items():
            assert not getattr(sub, "commands", None), f"servekit {name} {verb} nests deeper than NOUN VERB"


def test_hidden_top_level_commands_are_aliases_of_noun_verb_forms() -> None:
    hidden = sorted(p[0] for p, c in ALL if len(p) == 1 and c.hidden)
    assert hidden == ["inspect"]
    listed = re.findall(r"^│ (\S+) ", invoke("--help").output.split("Commands", 1)[1], re.MULTILINE)
    assert listed == [
        "serve",
        "up",
        "env",
        "logs",
        "deploy",
        "demo",
        "optimize",
        "recommend",
        "lineage",
        "model",
        "endpoint",
        "bench",
        "transform",
        "pipeline",
        "monitor",
        "keys",
        "autoscale",
        "registry",
        "images",
        "export",
    ]


def test_inspect_alias_and_model_inspect_agree(tmp_path: Path) -> None:
    from servekit.tools.demo.build import iris_onnx

    iris_onnx(tmp_path / "1")
    new, old = invoke("model", "inspect", str(tmp_path / "1")), invoke("inspect", str(tmp_path / "1"))
    assert new.exit_code == old.exit_code == 0, new.output + old.output
    assert "signature_def['serving_default']:" in new.output and new.output == old.output
    missing = [invoke(*cmd, str(tmp_path / "nope")) for cmd in (("model", "inspect"), ("inspect",))]
    assert [r.exit_code for r in missing] == [2, 2]
    assert all("does not exist" in r.output for r in missing)


@pytest.mark.parametrize("spelling", [("bench", "run"), ("bench",)], ids=["bench run", "bench (alias)"])
def test_bench_run_and_its_alias_parse_the_same_options(spelling: tuple[str, ...]) -> None:
    result = invoke(*spelling, "--url", "http://127.0.0.1:9", "--model", "m", "--rate", "10", "--engine", "wrk")
    assert result.exit_code == 2, result.output
    assert "closed loop only" in result.output  # the options reached bench's own checks


def test_bench_without_arguments_shows_its_verbs() -> None:
    out = invoke("bench").output
    assert "Usage: servekit bench" in out and "run" in out


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[ServerConfig]:
    """``servekit serve`` builds its config and stops where it would start the server."""
    import servekit.launch.serve

    configs: list[ServerConfig] = []
    monkeypatch.setattr(servekit.launch.serve, "run_server", lambda config, log_level, *_: configs.append(config))
    return configs


@pytest.mark.parametrize(
    "args",
    [
        ("--model_base_path", "{base}", "--file_system_poll_wait_seconds", "0", "--enable_batching"),
        ("--model-base-path", "{base}", "--file-system-poll-wait-seconds", "0", "--enable-batching"),
        ("--model_base_path={base}", "--file_system_poll_wait_seconds=0", "--enable_batching=true"),
        ("--model-base-path={base}", "--file-system-poll-wait-seconds=0", "--enable-batching=1"),
    ],
    ids=["underscores", "dashes", "tf-style =values", "dashes with =values"],
)
def test_serve_accepts_tf_serving_and_dashed_spellings(
    served: list[ServerConfig], tmp_path: Path, args: tuple[str, ...]
) -> None:
    result = invoke("serve", "--model_name", "m", *(a.format(base=tmp_path) for a in args))
    assert result.exit_code == 0, result.output
    (config,) = served
    assert config.models[0].base_path == str(tmp_path)
    assert config.file_system_poll_wait_seconds == 0
    assert config.batching is not None
    assert config.enable_model_warmup is True


@pytest.mark.parametrize(
    ("flags", "batching", "warmup"),
    [
        ((), False, True),
        (("--enable_batching=false", "--enable_model_warmup=false"), False, False),
        (("--no-enable_model_warmup",), False, False),
        (("--no-enable-model-warmup", "--enable_batching"), True, False),
        (("--enable_model_warmup=0",), False, False),
        (("--enable_batching", "--no-enable-batching"), False, True),
    ],
)
def test_serve_booleans(
    served: list[ServerConfig], tmp_path: Path, flags: tuple[str, ...], batching: bool, warmup: bool
) -> None:
    result = invoke("serve", "--model_base_path", str(tmp_path), *flags)
    assert result.exit_code == 0, result.output
    (config,) = served
    assert (config.batching is not None, config.enable_model_warmup) == (batching, warmup)


def test_serve_still_refuses_unknown_flags(served: list[ServerConfig]) -> None:
    result = invoke("serve", "--model_base_pat", "/m")
    assert result.exit_code == 2 and "No such option" in result.output
    assert served == []


@pytest.mark.parametrize(
    ("flags", "micros"), [((), 50), (("--inline_run_limit_micros", "0"), 0), (("--inline-run-limit-micros=200",), 200)]
)
def test_serve_inline_run_limit(
    served: list[ServerConfig], tmp_path: Path, flags: tuple[str, ...], micros: int
) -> None:
    result = invoke("serve", "--model_base_path", str(tmp_path), *flags)
    assert result.exit_code == 0, result.output
    (config,) = served
    assert config.inline_run_limit_micros == micros


def test_serve_refuses_a_negative_inline_run_limit(served: list[ServerConfig], tmp_path: Path) -> None:
    result = invoke("serve", "--model_base_path", str(tmp_path), "--inline_run_limit_micros", "-1")
    assert result.exit_code == 2 and "inline_run_limit_micros must be >= 0" in result.output
    assert served == []


@pytest.mark.parametrize(("args", "extra"), [(("serve",), "servekit[monitor]"), (("up",), "servekit[postgres]")])
def test_help_keeps_the_names_of_extras(args: tuple[str, ...], extra: str) -> None:
    """The help renderer reads ``[monitor]`` as markup unless it is escaped: the extra's name must survive."""
    shown = invoke(*args, "--help", width=400)
    assert shown.exit_code == 0, shown.output
    assert extra in shown.output
