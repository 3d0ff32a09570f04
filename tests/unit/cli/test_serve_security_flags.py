"""``servekit serve``'s hardening flags through typer's CliRunner: each spelling reaches ServerConfig, defaults are
loopback without auth and bounded connections, and a bad token file or limit is a usage error (exit 2) that
never echoes a token."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from servekit.cli.main import app
from servekit.config.models import ServerConfig

TOKEN = "t" * 24


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[ServerConfig]:
    import servekit.launch.serve

    configs: list[ServerConfig] = []
    monkeypatch.setattr(servekit.launch.serve, "run_server", lambda config, log_level, *_: configs.append(config))
    return configs


def serve(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["serve", *args], prog_name="servekit")
    return result.exit_code, result.output


def test_defaults_are_loopback_no_auth_and_bounded_connections(served: list[ServerConfig], tmp_path: Path) -> None:
    code, out = serve("--model_base_path", str(tmp_path))
    assert code == 0, out
    (config,) = served
    assert config.host == "127.0.0.1"
    assert config.auth is None
    limits = config.connections
    assert (limits.idle_timeout_seconds, limits.header_timeout_seconds, limits.body_timeout_seconds) == (10, 10, 60)
    assert limits.max_connections == 0  # derived from the file limit when the server starts


@pytest.mark.parametrize("dashed", [False, True], ids=["underscores", "dashes"])
def test_flags_reach_the_config(served: list[ServerConfig], tmp_path: Path, dashed: bool) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"inference:{TOKEN}\n")
    flags = {
        "--auth_token_file": str(tokens),
        "--idle_timeout_seconds": "1.5",
        "--header_timeout_seconds": "2",
        "--body_timeout_seconds": "3",
        "--max_connections": "40",
        "--host": "0.0.0.0",
    }
    args = [part for name, value in flags.items() for part in (name.replace("_", "-") if dashed else name, value)]
    code, out = serve("--model_base_path", str(tmp_path), *args)
    assert code == 0, out
    (config,) = served
    assert config.host == "0.0.0.0"
    assert config.auth is not None and config.auth.inference == {TOKEN} and not config.auth.admin
    limits = config.connections
    assert (limits.idle_timeout_seconds, limits.header_timeout_seconds, limits.body_timeout_seconds) == (1.5, 2, 3)
    assert limits.max_connections == 40


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--auth_token_file", "{tmp}/missing"), "cannot read auth token file"),
        (("--auth_token_file", "{tmp}/short"), "at least 16 characters"),
        (("--header_timeout_seconds", "-1"), "header_timeout_seconds must be >= 0"),
        (("--max_connections", "-5"), "max_connections must be >= 0"),
    ],
)
def test_bad_values_are_usage_errors(
    served: list[ServerConfig], tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    (tmp_path / "short").write_text("tooshort\n")
    code, out = serve("--model_base_path", str(tmp_path), *(a.format(tmp=tmp_path) for a in args))
    assert code == 2
    assert message in out
    assert "tooshort" not in out
    assert served == []
