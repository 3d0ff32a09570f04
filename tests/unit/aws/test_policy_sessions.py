"""Role sessions and IAM policy evaluation (issue 44): a job's key is allowed what its role's policy allows, carries
its token, and stops working when revoked or expired; the home's keys work as before."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest

from servekit.aws.credentials import Credentials
from servekit.aws.policy import PolicyError, allowed, check
from servekit.aws.sessions import KeyChain, SessionKeys, assumed_role_arn
from servekit.aws.sigv4 import Verifier
from servekit.services.s3.api import S3Service
from servekit.services.s3.names import permissions
from servekit.services.s3.store import ObjectStore
from servekit.testing.aws import asgi_client

ROLE = "arn:aws:iam::000000000000:role/service-role/Trainer"
READ_DATA = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Action": ["s3:GetObject", "s3:ListBucket"], "Resource": ["arn:aws:s3:::data*"]},
        {"Effect": "Allow", "Action": "s3:PutObject", "Resource": "arn:aws:s3:::out/*"},
        {"Effect": "Deny", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::data/secret/*"},
    ],
}


def test_an_explicit_deny_wins_and_nothing_is_allowed_unless_a_statement_says_so() -> None:
    assert allowed([READ_DATA], "s3:GetObject", "arn:aws:s3:::data/train.csv")
    assert allowed([READ_DATA], "S3:getobject", "arn:aws:s3:::data/train.csv")  # actions ignore case
    assert not allowed([READ_DATA], "s3:GetObject", "arn:aws:s3:::Data/train.csv")  # resources do not
    assert not allowed([READ_DATA], "s3:GetObject", "arn:aws:s3:::data/secret/key")
    assert not allowed([READ_DATA], "s3:PutObject", "arn:aws:s3:::data/x")
    assert allowed([READ_DATA], "s3:PutObject", "arn:aws:s3:::out/model.tar.gz")
    assert not allowed([READ_DATA], "sagemaker:CreateEndpoint")
    not_action = {"Statement": {"Effect": "Allow", "NotAction": "sagemaker:Create*", "Resource": "*"}}
    assert allowed([not_action], "sagemaker:DescribeEndpoint") and not allowed([not_action], "sagemaker:CreateModel")


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        ({"Statement": []}, "no Statement"),
        ({"Statement": [{"Effect": "Maybe", "Action": "*", "Resource": "*"}]}, "Effect must be Allow or Deny"),
        ({"Statement": [{"Effect": "Allow", "Resource": "*"}]}, "Action or NotAction"),
        ({"Statement": [{"Effect": "Allow", "Action": "*"}]}, "Resource or NotResource"),
        ({"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*", "Condition": {}}]}, "Condition"),
    ],
)
def test_a_policy_servekit_cannot_evaluate_exactly_is_refused(doc: Any, problem: str) -> None:
    with pytest.raises(PolicyError, match=problem):
        check(doc)


def test_s3_operations_need_iams_actions_on_bucket_and_object_arns() -> None:
    assert permissions("GetObject", "b", "k/1", {}) == [("s3:GetObject", "arn:aws:s3:::b/k/1")]
    assert permissions("ListObjectsV2", "b", None, {}) == [("s3:ListBucket", "arn:aws:s3:::b")]
    assert permissions("CopyObject", "b", "new", {"x-amz-copy-source": "/src/old%20key"}) == [
        ("s3:PutObject", "arn:aws:s3:::b/new"),
        ("s3:GetObject", "arn:aws:s3:::src/old key"),
    ]
    assert permissions("ListBuckets", "", None, {}) == [("s3:ListAllMyBuckets", "*")]


class Clock:
    """The wall clock at the start (botocore signs with the real time), moved by hand after."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def test_a_session_key_works_with_its_token_within_its_policy_until_revoked_or_expired(tmp_path: Path) -> None:
    creds = Credentials.load_or_create(tmp_path / "home")
    clock = Clock()
    sessions = SessionKeys(clock)
    keys = KeyChain(creds, sessions)
    service = S3Service(ObjectStore(tmp_path / "home" / "s3"), Verifier(keys, clock=clock))
    admin = asgi_client(service, "s3", creds.admin)
    for bucket in ("data", "out", "other"):
        admin.create_bucket(Bucket=bucket)
    admin.put_object(Bucket="data", Key="train.csv", Body=b"1,2\n")
    admin.put_object(Bucket="other", Key="x", Body=b"private")

    key = sessions.mint(ROLE, "SageMaker-job", [READ_DATA], 600)
    assert key.access_key_id.startswith("ASIA") and key.name == assumed_role_arn(ROLE, "SageMaker-job")
    assert key.name == "arn:aws:sts::000000000000:assumed-role/Trainer/SageMaker-job"
    job = asgi_client(service, "s3", key)
    assert job.get_object(Bucket="data", Key="train.csv")["Body"].read() == b"1,2\n"
    job.put_object(Bucket="out", Key="model.tar.gz", Body=b"m")
    for call in (
        lambda: job.get_object(Bucket="other", Key="x"),
        lambda: job.create_bucket(Bucket="mine"),
        lambda: job.put_object(Bucket="data", Key="overwrite", Body=b"x"),
    ):
        with pytest.raises(botocore.exceptions.ClientError) as exc:
            call()
        assert exc.value.response["Error"]["Code"] == "AccessDenied"
        assert "no identity-based policy allows" in exc.value.response["Error"]["Message"]

    tokenless = key.__class__(key.access_key_id, key.secret_access_key)  # the key pair without its token
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        asgi_client(service, "s3", tokenless).list_objects_v2(Bucket="data")
    assert exc.value.response["Error"]["Code"] == "InvalidToken"

    clock.now += 601
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        job.list_objects_v2(Bucket="data")
    assert exc.value.response["Error"]["Code"] == "ExpiredToken"

    clock.now -= 601
    sessions.revoke(key.access_key_id)
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        job.list_objects_v2(Bucket="data")
    assert exc.value.response["Error"]["Code"] == "InvalidAccessKeyId"
    assert admin.get_object(Bucket="other", Key="x")["Body"].read() == b"private"  # the home's keys as before
