"""``servekit env``: the export lines a shell evals, the SageMaker SDK config file it writes, the key scope, and
where it finds the running servekit up of a home."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml
from typer.testing import CliRunner

from servekit.aws import Credentials
from servekit.cli.main import app
from servekit.gateway.store import GatewayRoutes
from servekit.services.database import StateDB


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["env", *args], env=env or {}, prog_name="servekit")
    return result.exit_code, result.output


def exports(out: str) -> dict[str, str]:
    return {k: shlex.split(v)[0] for k, v in re.findall(r"^export (\w+)=(.*)$", out, re.MULTILINE)}


def test_the_lines_point_every_client_at_the_home_and_its_key(tmp_path: Path) -> None:
    creds = Credentials.load_or_create(tmp_path)
    code, out = run("--home", str(tmp_path))
    assert code == 0, out
    got = exports(out)
    assert got["AWS_ENDPOINT_URL"] == "http://127.0.0.1:8765"
    assert (got["AWS_ACCESS_KEY_ID"], got["AWS_SECRET_ACCESS_KEY"]) == (
        creds.admin.access_key_id,
        creds.admin.secret_access_key,
    )
    assert got["AWS_DEFAULT_REGION"] == "us-east-1"
    config = yaml.safe_load(Path(got["SAGEMAKER_USER_CONFIG_OVERRIDE"]).read_text())
    modules = config["SageMaker"]["PythonSDK"]["Modules"]
    assert modules["Session"]["DefaultS3Bucket"] == "sagemaker-us-east-1-000000000000"
    assert modules["TelemetryOptOut"] is True
    assert "unset AWS_PROFILE AWS_SESSION_TOKEN" in out


def test_an_invoke_scope_gets_an_application_key_made_once(tmp_path: Path) -> None:
    creds = Credentials.load_or_create(tmp_path)
    first = exports(run("--home", str(tmp_path), "--scope", "invoke")[1])["AWS_ACCESS_KEY_ID"]
    second = exports(run("--home", str(tmp_path), "--scope", "invoke")[1])["AWS_ACCESS_KEY_ID"]
    assert first == second != creds.admin.access_key_id
    assert Credentials.load(tmp_path).lookup(first).scope == "invoke"  # type: ignore[union-attr]
    assert run("--home", str(tmp_path), "--scope", "root")[0] == 2


def test_the_running_planes_address_comes_from_the_home(tmp_path: Path) -> None:
    Credentials.load_or_create(tmp_path)
    with StateDB.open(tmp_path) as db:
        GatewayRoutes(db.conn).record_leader("http://127.0.0.1:9123", 60, 1)
    assert exports(run("--home", str(tmp_path))[1])["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9123"
    assert (
        exports(run("--home", str(tmp_path), "--url", "http://[::1]:80/")[1])["AWS_ENDPOINT_URL"] == "http://[::1]:80"
    )


def test_a_home_without_keys_says_how_to_make_one(tmp_path: Path) -> None:
    code, out = run("--home", str(tmp_path / "empty"))
    assert code == 1 and "start servekit up with this home first" in out


def test_an_external_s3_of_servekit_up_goes_to_aws_endpoint_url_s3(tmp_path: Path) -> None:
    Credentials.load_or_create(tmp_path)
    assert "unset AWS_ENDPOINT_URL_S3" in run("--home", str(tmp_path))[1]
    (tmp_path / "s3-endpoint").write_text("http://127.0.0.1:9000\n")  # what servekit up --s3-endpoint records
    assert exports(run("--home", str(tmp_path))[1])["AWS_ENDPOINT_URL_S3"] == "http://127.0.0.1:9000"


def test_the_plane_never_takes_itself_for_an_external_s3() -> None:
    from servekit.launch.up import external_s3

    own = "http://127.0.0.1:8765"
    assert external_s3(None, {"AWS_ENDPOINT_URL": own + "/"}, own) is None  # a shell after eval "$(servekit env)"
    assert external_s3(None, {"AWS_ENDPOINT_URL_S3": "http://minio:9000"}, own) == "http://minio:9000"
    assert external_s3("http://ceph:7480/", {}, own) == "http://ceph:7480"
