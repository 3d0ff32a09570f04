"""STS AssumeRole (issue 45): a session of an IAM role of the account, with the role's policies (its inline and
attached ones; without any, what an execution role usually holds), answered in STS's shapes through a real
botocore client; GetCallerIdentity with the session answers the assumed role."""

from __future__ import annotations

import datetime
import functools
import json
import time
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest
from botocore.config import Config

from servekit.aws.credentials import Credentials
from servekit.aws.names import Account
from servekit.aws.policy import allowed
from servekit.aws.query import QueryService
from servekit.aws.sessions import KeyChain, SessionKeys
from servekit.aws.sigv4 import Verifier
from servekit.services.database import StateDB
from servekit.services.iam.api import IamApi, documents
from servekit.services.sts.api import StsService
from servekit.services.training.roles import role_policy
from servekit.testing.aws import asgi_client

ACCOUNT = Account(account_id="123456789012")
TRUST = json.dumps(
    {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}]}
)
READ = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::data/*"}],
}


class Plane:
    def __init__(self, home: Path) -> None:
        self.now = time.time()  # botocore signs with the real time; moved by hand after
        self.creds = Credentials.load_or_create(home)
        self.sessions = SessionKeys(clock=lambda: self.now)
        roles = StateDB.open(home).iam_roles
        self.iam = IamApi(roles, ACCOUNT)
        held = functools.partial(documents, roles)
        # a wide skew: the test moves the clock past a 900 s session, with requests signed at the real time
        verifier = Verifier(KeyChain(self.creds, self.sessions), clock=lambda: self.now, max_skew_s=3600)
        self.sts_app = StsService(ACCOUNT, verifier, roles, self.sessions, lambda arn: role_policy(home, arn, {}, held))
        self.iam_app = QueryService("iam", self.iam.handlers(), Verifier(self.creds, region="us-east-1"))

    def sts(self, key: Any = None) -> Any:
        # botocore's own checks off: the plane's answers to bad input are under test
        return asgi_client(self.sts_app, "sts", key or self.creds.admin, Config(parameter_validation=False))


@pytest.fixture
def plane(tmp_path: Path) -> Plane:
    return Plane(tmp_path)


def test_a_session_of_a_role_has_its_policies_and_says_who_it_is(plane: Plane) -> None:
    iam = asgi_client(plane.iam_app, "iam", plane.creds.admin)
    role_id = iam.create_role(RoleName="Reader", AssumeRolePolicyDocument=TRUST)["Role"]["RoleId"]
    iam.put_role_policy(RoleName="Reader", PolicyName="read", PolicyDocument=json.dumps(READ))
    arn = "arn:aws:iam::123456789012:role/Reader"
    out = plane.sts().assume_role(RoleArn=arn, RoleSessionName="nightly", DurationSeconds=900)
    c = out["Credentials"]
    assert c["AccessKeyId"].startswith("ASIA") and c["SecretAccessKey"] and c["SessionToken"]
    assert c["Expiration"] == datetime.datetime.fromtimestamp(int(plane.now) + 900, datetime.UTC)
    assert out["AssumedRoleUser"] == {
        "AssumedRoleId": f"{role_id}:nightly",
        "Arn": "arn:aws:sts::123456789012:assumed-role/Reader/nightly",
    }
    key = plane.sessions.lookup(c["AccessKeyId"])
    assert key is not None and key.policy is not None
    assert allowed(key.policy, "s3:GetObject", "arn:aws:s3:::data/x") and not allowed(key.policy, "s3:PutObject")
    me = plane.sts(key).get_caller_identity()
    assert (me["Arn"], me["UserId"]) == ("arn:aws:sts::123456789012:assumed-role/Reader/nightly", f"{role_id}:nightly")
    plane.now += 901  # the session ends at its Expiration
    with pytest.raises(botocore.exceptions.ClientError) as expired:
        plane.sts(key).get_caller_identity()
    assert expired.value.response["Error"]["Code"] == "ExpiredToken"


def test_a_role_without_policies_holds_an_execution_roles_and_sessions_need_sts_assume_role(plane: Plane) -> None:
    plane.iam.ensure_default_role()
    out = plane.sts().assume_role(RoleArn="arn:aws:iam::123456789012:role/SageMakerRole", RoleSessionName="me")
    key = plane.sessions.lookup(out["Credentials"]["AccessKeyId"])
    assert key is not None and key.policy is not None
    assert allowed(key.policy, "sagemaker:DescribeTrainingJob")
    assert not allowed(key.policy, "sagemaker:CreateEndpoint") and not allowed(key.policy, "sts:AssumeRole")
    with pytest.raises(botocore.exceptions.ClientError) as again:  # that session may not assume another role
        plane.sts(key).assume_role(RoleArn="arn:aws:iam::123456789012:role/SageMakerRole", RoleSessionName="again")
    assert again.value.response["Error"]["Code"] == "AccessDenied"


@pytest.mark.parametrize(
    ("arn", "why"),
    [
        ("arn:aws:iam::123456789012:role/Nobody", "AccessDenied"),  # no such role
        ("arn:aws:iam::999999999999:role/SageMakerRole", "AccessDenied"),  # another account's
        ("arn:aws:iam::123456789012:role/other/SageMakerRole", "AccessDenied"),  # another path
    ],
)
def test_roles_that_are_not_this_accounts_are_refused(plane: Plane, arn: str, why: str) -> None:
    plane.iam.ensure_default_role()
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        plane.sts().assume_role(RoleArn=arn, RoleSessionName="someone")
    assert refused.value.response["Error"]["Code"] == why
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert arn in refused.value.response["Error"]["Message"]


def test_durations_past_the_roles_maximum_and_session_policies_are_refused_with_the_reason(plane: Plane) -> None:
    plane.iam.ensure_default_role()
    arn = "arn:aws:iam::123456789012:role/SageMakerRole"
    with pytest.raises(botocore.exceptions.ClientError) as long:
        plane.sts().assume_role(RoleArn=arn, RoleSessionName="someone", DurationSeconds=7200)
    assert "exceeds the MaxSessionDuration" in long.value.response["Error"]["Message"]
    with pytest.raises(botocore.exceptions.ClientError) as scoped:
        plane.sts().assume_role(RoleArn=arn, RoleSessionName="someone", Policy=json.dumps(READ))
    assert "session policies" in scoped.value.response["Error"]["Message"]
    with pytest.raises(botocore.exceptions.ClientError) as name:
        plane.sts().assume_role(RoleArn=arn, RoleSessionName="no spaces allowed")
    assert name.value.response["Error"]["Code"] == "ValidationError"


def test_the_accounts_own_key_is_the_execution_role_as_in_a_notebook(plane: Plane) -> None:
    """What the SDK's get_execution_role() reads: an assumed role's ARN, whose role GetRole then names."""
    assert plane.sts().get_caller_identity()["Arn"].endswith(":user/admin")  # no execution role in IAM yet
    plane.iam.ensure_default_role()
    me = plane.sts().get_caller_identity()
    role_id = plane.iam.roles.get("SageMakerRole").role_id  # type: ignore[union-attr]
    assert me["Arn"] == "arn:aws:sts::123456789012:assumed-role/SageMakerRole/admin"
    assert me["UserId"] == f"{role_id}:admin"
    app = plane.creds.add_key("invoke", "my-app")  # a key of one scope stays a user
    assert plane.sts(app).get_caller_identity()["Arn"] == "arn:aws:iam::123456789012:user/my-app"
