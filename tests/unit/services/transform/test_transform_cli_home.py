"""The transform CLI finds the state database through servekit.state: --home, then $SERVEKIT_HOME, then
./.servekit; a database it cannot use is a one-line error, not a traceback."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servekit.cli.transform_cmd import transform_app
from servekit.services.database import StateDB
from servekit.state import DB_NAME

runner = CliRunner()


def test_the_home_comes_from_the_flag_then_the_environment_then_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert runner.invoke(transform_app, ["list"], env={"SERVEKIT_HOME": ""}).exit_code == 0
    assert (tmp_path / ".servekit" / DB_NAME).exists()
    assert runner.invoke(transform_app, ["list"], env={"SERVEKIT_HOME": str(tmp_path / "env")}).exit_code == 0
    assert (tmp_path / "env" / DB_NAME).exists()
    flag = ["list", "--home", str(tmp_path / "flag")]
    assert runner.invoke(transform_app, flag, env={"SERVEKIT_HOME": str(tmp_path / "env2")}).exit_code == 0
    assert (tmp_path / "flag" / DB_NAME).exists() and not (tmp_path / "env2").exists()


def test_a_database_of_a_newer_servekit_is_a_clear_error(tmp_path: Path) -> None:
    StateDB.open(tmp_path).close()
    with sqlite3.connect(tmp_path / DB_NAME) as raw:
        raw.execute("INSERT INTO schema_migrations VALUES ('transform_jobs', 2, 'future', 0)")
    raw.close()
    for args in (["list"], ["status", "x"]):
        result = runner.invoke(transform_app, [*args, "--home", str(tmp_path)])
        assert result.exit_code == 2, result.output
        assert "written by a newer servekit" in result.stderr and result.exception is not None
        assert isinstance(result.exception, SystemExit)  # typer.Exit, not a traceback
