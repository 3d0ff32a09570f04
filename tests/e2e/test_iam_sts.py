"""IAM roles and STS AssumeRole on a real ``servekit up`` through boto3 (issue 45): a new home has the SDK's
``SageMakerRole``; a role made with CreateRole and given a policy with PutRolePolicy is assumed with AssumeRole,
and its session may do on S3 and SageMaker exactly what the policy says; a training job of that role runs with
the same policy."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator

import boto3
import botocore.exceptions
import pytest
from tests.e2e.test_training_jobs import FAST, clients, job

from servekit.testing.hosting import UpProcess

pytestmark = pytest.mark.e2e
TRUST = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Principal": {"Service": "sagemaker.amazonaws.com"}, "Action": "sts:AssumeRole"}],
}
BUCKET = "sagemaker-us-east-1-000000000000"


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    u = UpProcess(tmp_path_factory.mktemp("iam") / "home")
    u.start()
    try:
        yield u
    finally:
        u.stop()


def _session_client(up: UpProcess, service: str, creds: dict[str, str]) -> object:
    return boto3.client(
        service,
        endpoint_url=up.url,
        region_name="us-east-1",
        aws_access_key_id=creds["AccessKeyId"],
        aws_secret_access_key=creds["SecretAccessKey"],
        aws_session_token=creds["SessionToken"],
    )


def test_a_new_home_has_the_sdks_execution_role(up: UpProcess) -> None:
    role = up.client("iam").get_role(RoleName="SageMakerRole")["Role"]
    assert role["Arn"] == "arn:aws:iam::000000000000:role/SageMakerRole"
    assert role["AssumeRolePolicyDocument"] == TRUST


def test_an_assumed_roles_session_may_do_what_its_policy_says(up: UpProcess) -> None:
    iam, s3 = up.client("iam"), up.client("s3")
    s3.put_object(Bucket=BUCKET, Key="shared/data.csv", Body=b"1,2\n")
    iam.create_role(RoleName="Analyst", AssumeRolePolicyDocument=json.dumps(TRUST))
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{BUCKET}/shared/*"},
            {"Effect": "Allow", "Action": "sagemaker:List*", "Resource": "*"},
        ],
    }
    iam.put_role_policy(RoleName="Analyst", PolicyName="read-shared", PolicyDocument=json.dumps(policy))
    out = up.client("sts").assume_role(RoleArn="arn:aws:iam::000000000000:role/Analyst", RoleSessionName="alice")
    creds = out["Credentials"]
    who = _session_client(up, "sts", creds).get_caller_identity()  # type: ignore[attr-defined]
    assert who["Arn"] == "arn:aws:sts::000000000000:assumed-role/Analyst/alice"
    as_analyst = _session_client(up, "s3", creds)
    assert as_analyst.get_object(Bucket=BUCKET, Key="shared/data.csv")["Body"].read() == b"1,2\n"  # type: ignore[attr-defined]
    with pytest.raises(botocore.exceptions.ClientError) as put:
        as_analyst.put_object(Bucket=BUCKET, Key="shared/new.csv", Body=b"x")  # type: ignore[attr-defined]
    assert put.value.response["Error"]["Code"] == "AccessDenied"
    sm = _session_client(up, "sagemaker", creds)
    assert "TrainingJobSummaries" in sm.list_training_jobs()  # type: ignore[attr-defined]
    with pytest.raises(botocore.exceptions.ClientError) as create:
        sm.create_model(ModelName="m", PrimaryContainer={"Image": "servekit"})  # type: ignore[attr-defined]
    assert create.value.response["Error"]["Code"] == "AccessDeniedException"
    with pytest.raises(botocore.exceptions.ClientError) as iam_call:
        _session_client(up, "iam", creds).delete_role_policy(RoleName="Analyst", PolicyName="read-shared")  # type: ignore[attr-defined]
    assert iam_call.value.response["Error"]["Code"] == "AccessDenied"


SEES = """
import boto3, botocore.exceptions, json, os
s3 = boto3.client("s3")
def tried(call):
    try:
        call()
        return "allowed"
    except botocore.exceptions.ClientError as exc:
        return exc.response["Error"]["Code"]
seen = {
    "read": tried(lambda: s3.get_object(Bucket=os.environ["BUCKET"], Key="shared/data.csv")),
    "write": tried(lambda: s3.put_object(Bucket=os.environ["BUCKET"], Key="shared/by-job.csv", Body=b"x")),
    "who": boto3.client("sts").get_caller_identity()["Arn"],
}
json.dump(seen, open("/opt/ml/model/seen.json", "w"))
"""


def test_a_training_job_of_a_role_in_iam_runs_with_its_policies(up: UpProcess) -> None:
    iam = up.client("iam")
    iam.create_role(RoleName="JobReader", AssumeRolePolicyDocument=json.dumps(TRUST))
    iam.attach_role_policy(RoleName="JobReader", PolicyArn="arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess")
    sm, s3, _ = clients(up)
    s3.put_object(Bucket=BUCKET, Key="shared/data.csv", Body=b"1,2\n")
    request = job(s3, "iam-reader", SEES, Environment={"BUCKET": BUCKET})
    request["RoleArn"] = "arn:aws:iam::000000000000:role/JobReader"
    sm.create_training_job(**request)
    sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="iam-reader", WaiterConfig=FAST)
    d = sm.describe_training_job(TrainingJobName="iam-reader")
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    bucket, _, key = d["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("s3://").partition("/")
    with tarfile.open(fileobj=io.BytesIO(s3.get_object(Bucket=bucket, Key=key)["Body"].read())) as tar:
        seen = json.load(tar.extractfile("seen.json"))  # type: ignore[arg-type]
    assert seen["read"] == "allowed" and seen["write"] == "AccessDenied"
    assert seen["who"].startswith("arn:aws:sts::000000000000:assumed-role/JobReader/SageMaker-iam-reader")
