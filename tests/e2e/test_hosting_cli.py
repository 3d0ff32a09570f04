"""The hosting CLI end to end: `servekit deploy`, `servekit endpoint|model|keys ...` as real processes against a
real `servekit up`, checked through boto3 with the home's keys (and with an invoke-only key)."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import boto3
import botocore.exceptions
import pytest
from tests.e2e.test_hosting import invoke

from servekit.services.hosting.instance_types import load_instance_types
from servekit.testing.hosting import UpProcess
from servekit.testing.hosting import scaling_model as handler_model
from servekit.tools.demo.build import iris_sklearn

pytestmark = pytest.mark.e2e


def servekit(up: UpProcess, *args: str, home: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the CLI as a user would, against this `servekit up` (--url from $SERVEKIT_URL, --home given)."""
    env = {**os.environ, "SERVEKIT_URL": up.url, "COLUMNS": "160"}
    env.pop("SERVEKIT_HOME", None)
    extra = ["--home", str(up.home)] if home else []
    return subprocess.run(
        [sys.executable, "-m", "servekit.cli.main", *args, *extra],
        capture_output=True,
        text=True,
        env=env,
        timeout=100,
    )


def one_line_error(result: subprocess.CompletedProcess[str], starts: str, after_progress: bool = False) -> str:
    """Exit 1 and one error line on stderr (after deploy's progress lines, when it has got that far)."""
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("servekit: ")]
    assert len(errors) == 1 and errors[0].startswith(starts), result.stderr
    assert len(lines) == 1 or (after_progress and lines[-1] == errors[0]), result.stderr
    return errors[0]


def test_deploy_list_describe_invoke_and_delete(up: UpProcess, tmp_path: Path) -> None:
    model_dir = handler_model(tmp_path, "doubler", 2.0)
    result = servekit(up, "deploy", str(model_dir), "--name", "dbl", "--instance-count", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "endpoint dbl is InService" in out
    assert 'curl --aws-sigv4 "aws:amz:us-east-1:sagemaker"' in out and f"{up.url}/endpoints/dbl/invocations" in out
    assert 'boto3.client("sagemaker-runtime")' in out and 'invoke_endpoint(EndpointName="dbl"' in out
    assert '--user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY"' in out and 'eval "$(servekit env --home' in out
    secret = json.loads((up.home / "credentials.json").read_text())["keys"][0]["secret_access_key"]
    assert secret not in out + result.stderr  # the secret file is named, the secret never printed

    sm, rt = up.sm(), up.rt()
    desc = sm.describe_endpoint(EndpointName="dbl")
    assert desc["EndpointStatus"] == "InService" and desc["EndpointConfigName"] == "dbl-config"
    assert [(v["VariantName"], v["CurrentInstanceCount"]) for v in desc["ProductionVariants"]] == [("AllTraffic", 2)]
    model = sm.describe_model(ModelName="dbl")
    assert model["PrimaryContainer"]["ModelDataUrl"] == str(model_dir.resolve())
    assert invoke(rt, "dbl", 3.0) == ("AllTraffic", 6.0)

    listed = servekit(up, "endpoint", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    (entry,) = json.loads(listed.stdout)["Endpoints"]
    assert entry["EndpointName"] == "dbl" and entry["EndpointStatus"] == "InService"
    assert "T" in entry["CreationTime"]  # ISO 8601
    table = servekit(up, "endpoint", "list")
    assert table.returncode == 0 and "dbl" in table.stdout and "InService" in table.stdout

    described = servekit(up, "endpoint", "describe", "dbl", "--json")
    assert described.returncode == 0, described.stderr
    doc = json.loads(described.stdout)
    assert doc["EndpointArn"] == desc["EndpointArn"] and "ResponseMetadata" not in doc
    assert doc["ProductionVariants"][0]["CurrentInstanceCount"] == 2
    price = load_instance_types()["ml.t2.medium"].price_per_hour
    assert doc["ServekitCostPerHour"] == pytest.approx(2 * price)  # servekit's own field, kept by the CLI
    table = servekit(up, "endpoint", "describe", "dbl")
    assert table.returncode == 0 and "AllTraffic" in table.stdout and "dbl-config" in table.stdout

    models = servekit(up, "model", "list", "--json")
    assert models.returncode == 0, models.stderr
    assert [m["ModelName"] for m in json.loads(models.stdout)["Models"]] == ["dbl"]
    shown = servekit(up, "model", "describe", "dbl")
    assert shown.returncode == 0 and str(model_dir.resolve()) in shown.stdout
    assert json.loads(servekit(up, "model", "describe", "dbl", "--json").stdout)["ModelName"] == "dbl"

    deleted = servekit(up, "endpoint", "delete", "dbl")  # waits until it is gone
    assert deleted.returncode == 0, deleted.stderr
    assert json.loads(servekit(up, "endpoint", "list", "--json").stdout) == {"Endpoints": []}
    with pytest.raises(botocore.exceptions.ClientError) as err:
        sm.describe_endpoint(EndpointName="dbl")
    assert err.value.response["Error"]["Code"] == "ValidationException"


def test_deploy_prints_a_body_the_model_takes(up: UpProcess, tmp_path: Path) -> None:
    """Issue 30, item 8: a four-feature model's printout carried [1.0, 2.0], which the model answers with 424."""
    iris_sklearn(tmp_path / "iris" / "1")
    result = servekit(up, "deploy", str(tmp_path / "iris"), "--name", "iris")
    assert result.returncode == 0, result.stdout + result.stderr
    [curl_body] = re.findall(r"-d '([^']*)'", result.stdout)
    [boto_body] = re.findall(r"Body=b'([^']*)'", result.stdout)
    assert curl_body == boto_body == "[[0.0, 0.0, 0.0, 0.0]]"
    answer = up.rt().invoke_endpoint(EndpointName="iris", ContentType="application/json", Body=boto_body.encode())
    assert answer["ResponseMetadata"]["HTTPStatusCode"] == 200 and answer["Body"].read()
    assert servekit(up, "endpoint", "delete", "iris").returncode == 0


def test_errors_are_one_line_and_exit_1(up: UpProcess, tmp_path: Path) -> None:
    line = one_line_error(servekit(up, "endpoint", "describe", "nope"), "servekit: ValidationException: ")
    assert "Could not find endpoint" in line
    one_line_error(servekit(up, "model", "describe", "nope"), "servekit: ValidationException: ")
    one_line_error(servekit(up, "endpoint", "delete", "nope"), "servekit: ValidationException: ")

    # A model that cannot load: deploy says why the endpoint failed.
    line = one_line_error(
        servekit(up, "deploy", str(handler_model(tmp_path, "broken", 1.0, broken=True)), "--name", "broken"),
        "servekit: endpoint broken Failed: ",
        after_progress=True,
    )
    assert "weights file is corrupt" in line

    # The names are taken now: nothing is created, and the message says which exist.
    model_dir = handler_model(tmp_path, "fine", 1.0)
    line = one_line_error(servekit(up, "deploy", str(model_dir), "--name", "broken"), "servekit: ")
    assert "model broken, endpoint config broken-config and endpoint broken already exist" in line

    # A step the API refuses undoes what deploy made before it.
    one_line_error(
        servekit(up, "deploy", str(model_dir), "--name", "big", "--instance-type", "ml.nope"),
        "servekit: ValidationException: ",
    )
    names = [m["ModelName"] for m in up.sm().list_models()["Models"]]
    assert names == ["broken"]

    line = one_line_error(servekit(up, "endpoint", "list", "--url", "http://127.0.0.1:9"), "servekit: cannot reach")
    assert "http://127.0.0.1:9" in line
    missing = tmp_path / "no-home"
    result = subprocess.run(
        [sys.executable, "-m", "servekit.cli.main", "model", "list", "--url", up.url, "--home", str(missing)],
        capture_output=True,
        text=True,
        timeout=100,
    )
    one_line_error(result, "servekit: no access keys in")
    assert not missing.exists()  # a typo in --home never makes a stray home with a new key

    bad = servekit(up, "deploy", str(tmp_path / "not-there"), "--name", "x")
    assert bad.returncode == 2 and "is not a directory" in bad.stderr


def test_an_invoke_key_invokes_but_cannot_create(up: UpProcess, tmp_path: Path) -> None:
    assert servekit(up, "deploy", str(handler_model(tmp_path, "m", 2.0)), "--name", "app").returncode == 0

    created = servekit(up, "keys", "create", "--scope", "invoke", "--name", "my-app", "--json")
    assert created.returncode == 0, created.stderr
    key = json.loads(created.stdout)
    assert key["Scope"] == "invoke" and key["Name"] == "my-app" and key["AccessKeyId"].startswith("AKIA")
    assert stat.S_IMODE((up.home / "credentials.json").stat().st_mode) == 0o600
    plain = servekit(up, "keys", "create", "--scope", "admin")
    assert plain.returncode == 0 and "AWS_SECRET_ACCESS_KEY=" in plain.stdout

    listed = servekit(up, "keys", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    scopes = {k["AccessKeyId"]: (k["Name"], k["Scope"]) for k in json.loads(listed.stdout)["Keys"]}
    assert scopes[key["AccessKeyId"]] == ("my-app", "invoke")
    assert sorted(s for _, s in scopes.values()) == ["admin", "admin", "invoke"]
    table = servekit(up, "keys", "list")
    assert key["AccessKeyId"] in table.stdout and key["SecretAccessKey"] not in table.stdout

    # servekit up sees the new key without a restart.
    session = boto3.Session(
        aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"], region_name="us-east-1"
    )
    rt = session.client("sagemaker-runtime", endpoint_url=up.url)
    assert invoke(rt, "app", 4.0) == ("AllTraffic", 8.0)
    sm = session.client("sagemaker", endpoint_url=up.url)
    with pytest.raises(botocore.exceptions.ClientError) as err:
        sm.create_model(ModelName="nope", PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(tmp_path)})
    assert err.value.response["Error"]["Code"] == "AccessDeniedException"
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    with pytest.raises(botocore.exceptions.ClientError) as err:
        sm.list_endpoints()
    assert err.value.response["Error"]["Code"] == "AccessDeniedException"
