"""``servekit up --print-systemd-unit``: a unit that restarts a plane that died, stops it by SIGTERM to the plane
alone, names the home and files absolutely, keeps a database password out, and whose command is a valid
``servekit up`` with the same options (run with the flag, it prints the same unit)."""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

from typer.testing import CliRunner

from servekit.cli.main import app


def _unit(*args: str) -> str:
    result = CliRunner().invoke(app, ["up", *args, "--print-systemd-unit"], env={}, prog_name="servekit")
    assert result.exit_code == 0, result.output
    return result.output


def _exec_start(unit: str) -> list[str]:
    (line,) = re.findall(r"^ExecStart=(.*)$", unit, re.MULTILINE)
    return shlex.split(line)


def test_the_unit_restarts_the_plane_and_runs_it_with_the_options_given(tmp_path: Path) -> None:
    home = tmp_path / "home"
    unit = _unit(
        "--home", str(home), "--port", "9100", "--images", "images.yaml", "--allow-installs",
        "--database-url", "postgresql://servekit:s3cret@db/servekit",
    )  # fmt: skip
    assert "[Service]" in unit and "[Install]" in unit
    assert "\nRestart=on-failure\n" in unit
    assert "\nKillMode=mixed\n" in unit  # the plane stops its own instances on SIGTERM
    assert "s3cret" not in unit
    command = _exec_start(unit)
    assert command[:4] == [sys.executable, "-m", "servekit.cli.main", "up"]
    args = command[4:]
    assert args[args.index("--home") + 1] == str(home.absolute())
    assert args[args.index("--port") + 1] == "9100"
    assert args[args.index("--images") + 1] == str(Path(os.getcwd(), "images.yaml"))
    assert "--allow-installs" in args and "--print-systemd-unit" not in args
    assert not home.exists()  # printing a unit starts nothing and writes nothing

    # The unit's own command line is one `servekit up` accepts, and it describes the same plane.
    assert _unit(*args) == unit


def test_sns_webhooks_are_kept_in_the_unit_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    done = "arn:aws:sns:us-east-1:000000000000:done=http://127.0.0.1:9000/done"
    failed = "arn:aws:sns:us-east-1:000000000000:failed=http://127.0.0.1:9000/failed"
    unit = _unit("--home", str(tmp_path / "home"), "--sns-webhook", done, "--sns-webhook", failed)
    args = _exec_start(unit)[4:]
    assert [args[i + 1] for i, a in enumerate(args) if a == "--sns-webhook"] == [done, failed]
    bad = CliRunner().invoke(
        app, ["up", "--home", str(tmp_path / "home"), "--sns-webhook", "http://127.0.0.1:9000/x"], env={}
    )
    assert bad.exit_code == 2
    assert "expected TOPIC_ARN=URL" in bad.output
    assert not (tmp_path / "home").exists()  # refused before anything was built
