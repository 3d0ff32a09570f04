"""IAM's roles in the query protocol through a real botocore client (issue 45): Create/Get/List/Delete Role, inline
policies, attached AWS managed policies; documents come back as botocore decodes IAM's (URL-encoded JSON); errors
carry IAM's codes and messages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest
from botocore.config import Config

from servekit.aws.credentials import Credentials
from servekit.aws.names import Account
from servekit.aws.query import QueryService
from servekit.aws.sigv4 import Verifier
from servekit.services.database import StateDB
from servekit.services.iam.api import DEFAULT_ROLE, IamApi, documents
from servekit.testing.aws import asgi_client

TRUST = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Principal": {"Service": "sagemaker.amazonaws.com"}, "Action": "sts:AssumeRole"}],
}
READ = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::data/*"}],
}


@pytest.fixture
def iam(tmp_path: Path) -> tuple[Any, IamApi, Credentials]:
    creds = Credentials.load_or_create(tmp_path)
    api = IamApi(StateDB.open(tmp_path).iam_roles, Account(account_id="123456789012"))
    service = QueryService("iam", api.handlers(), Verifier(creds, region="us-east-1"))
    # botocore's own checks off: the plane's answers to bad input are under test
    return asgi_client(service, "iam", creds.admin, Config(parameter_validation=False)), api, creds


def _code(exc: pytest.ExceptionInfo[botocore.exceptions.ClientError]) -> tuple[str, str]:
    return exc.value.response["Error"]["Code"], exc.value.response["Error"]["Message"]


def test_a_role_is_created_read_listed_and_deleted(iam: tuple[Any, IamApi, Credentials]) -> None:
    client, _, _ = iam
    made = client.create_role(
        RoleName="Trainer",
        Path="/ml/",
        AssumeRolePolicyDocument=json.dumps(TRUST),
        Description="trains",
        MaxSessionDuration=7200,
        Tags=[{"Key": "team", "Value": "ml"}],
    )["Role"]
    assert made["Arn"] == "arn:aws:iam::123456789012:role/ml/Trainer" and made["RoleId"].startswith("AROA")
    got = client.get_role(RoleName="trainer")["Role"]  # names are matched without regard to case
    assert got["RoleName"] == "Trainer" and got["AssumeRolePolicyDocument"] == TRUST  # decoded by botocore
    assert (got["MaxSessionDuration"], got["Description"], got["Tags"]) == (
        7200,
        "trains",
        [{"Key": "team", "Value": "ml"}],
    )
    assert got["CreateDate"] == made["CreateDate"]
    with pytest.raises(botocore.exceptions.ClientError) as again:
        client.create_role(RoleName="TRAINER", AssumeRolePolicyDocument=json.dumps(TRUST))
    assert _code(again) == ("EntityAlreadyExists", "Role with name TRAINER already exists.")
    client.create_role(RoleName="Other", AssumeRolePolicyDocument=json.dumps(TRUST))
    assert [r["RoleName"] for r in client.list_roles(PathPrefix="/ml/")["Roles"]] == ["Trainer"]
    first = client.list_roles(MaxItems=1)
    assert first["IsTruncated"] and [r["RoleName"] for r in first["Roles"]] == ["Other"]
    rest = client.list_roles(MaxItems=1, Marker=first["Marker"])
    assert [r["RoleName"] for r in rest["Roles"]] == ["Trainer"] and not rest["IsTruncated"]
    client.update_role(RoleName="Trainer", Description="trains more")
    assert client.get_role(RoleName="Trainer")["Role"]["Description"] == "trains more"
    client.delete_role(RoleName="Trainer")
    with pytest.raises(botocore.exceptions.ClientError) as gone:
        client.get_role(RoleName="Trainer")
    assert _code(gone) == ("NoSuchEntity", "The role with name Trainer cannot be found.")
    assert gone.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_bad_input_gets_iams_errors(iam: tuple[Any, IamApi, Credentials]) -> None:
    client, _, _ = iam
    with pytest.raises(botocore.exceptions.ClientError) as short:
        client.create_role(RoleName="r", AssumeRolePolicyDocument=json.dumps(TRUST), MaxSessionDuration=60)
    assert short.value.response["Error"]["Code"] == "ValidationError"
    assert "'maxSessionDuration' failed to satisfy constraint" in short.value.response["Error"]["Message"]
    with pytest.raises(botocore.exceptions.ClientError) as not_json:
        client.create_role(RoleName="r", AssumeRolePolicyDocument="{not json")
    assert _code(not_json)[0] == "MalformedPolicyDocument"
    with pytest.raises(botocore.exceptions.ClientError) as name:
        client.create_role(RoleName="bad name!", AssumeRolePolicyDocument=json.dumps(TRUST))
    assert name.value.response["Error"]["Code"] == "ValidationError"


def test_inline_policies_are_checked_kept_and_block_deleting_the_role(iam: tuple[Any, IamApi, Credentials]) -> None:
    client, api, _ = iam
    client.create_role(RoleName="Reader", AssumeRolePolicyDocument=json.dumps(TRUST))
    conditioned = {"Version": "2012-10-17", "Statement": [{**READ["Statement"][0], "Condition": {"Bool": {}}}]}
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        client.put_role_policy(RoleName="Reader", PolicyName="read", PolicyDocument=json.dumps(conditioned))
    code, message = _code(refused)
    assert code == "MalformedPolicyDocument" and "Condition" in message
    client.put_role_policy(RoleName="Reader", PolicyName="read", PolicyDocument=json.dumps(READ))
    got = client.get_role_policy(RoleName="Reader", PolicyName="read")
    assert (got["RoleName"], got["PolicyName"], got["PolicyDocument"]) == ("Reader", "read", READ)
    assert client.list_role_policies(RoleName="Reader")["PolicyNames"] == ["read"]
    assert documents(api.roles, "reader") == [READ]
    with pytest.raises(botocore.exceptions.ClientError) as conflict:
        client.delete_role(RoleName="Reader")
    assert _code(conflict) == ("DeleteConflict", "Cannot delete entity, must delete policies first.")
    client.delete_role_policy(RoleName="Reader", PolicyName="read")
    with pytest.raises(botocore.exceptions.ClientError) as missing:
        client.get_role_policy(RoleName="Reader", PolicyName="read")
    assert _code(missing) == ("NoSuchEntity", "The role policy with name read cannot be found.")
    client.delete_role(RoleName="Reader")
    assert documents(api.roles, "Reader") is None


def test_aws_managed_policies_servekit_evaluates_can_be_attached(iam: tuple[Any, IamApi, Credentials]) -> None:
    client, api, _ = iam
    client.create_role(RoleName="Viewer", AssumeRolePolicyDocument=json.dumps(TRUST))
    with pytest.raises(botocore.exceptions.ClientError) as unknown:
        client.attach_role_policy(RoleName="Viewer", PolicyArn="arn:aws:iam::aws:policy/AmazonEC2FullAccess")
    code, message = _code(unknown)
    assert code == "NoSuchEntity" and "AmazonS3ReadOnlyAccess" in message  # says which servekit attaches
    arn = "arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess"
    client.attach_role_policy(RoleName="Viewer", PolicyArn=arn)
    client.attach_role_policy(RoleName="Viewer", PolicyArn=arn)  # again: no change, as IAM answers
    listed = client.list_attached_role_policies(RoleName="Viewer")["AttachedPolicies"]
    assert listed == [{"PolicyName": "AmazonS3ReadOnlyAccess", "PolicyArn": arn}]
    (doc,) = documents(api.roles, "Viewer") or []
    assert doc["Statement"][0]["Action"] == ["s3:Get*", "s3:List*", "s3:Describe*"]
    with pytest.raises(botocore.exceptions.ClientError) as conflict:
        client.delete_role(RoleName="Viewer")
    assert _code(conflict)[1] == "Cannot delete entity, must detach all policies first."
    client.detach_role_policy(RoleName="Viewer", PolicyArn=arn)
    with pytest.raises(botocore.exceptions.ClientError) as twice:
        client.detach_role_policy(RoleName="Viewer", PolicyArn=arn)
    assert _code(twice) == ("NoSuchEntity", f"Policy {arn} was not found.")


def test_only_the_accounts_own_keys_manage_roles_and_the_default_role_is_made_once(
    iam: tuple[Any, IamApi, Credentials],
) -> None:
    client, api, creds = iam
    api.ensure_default_role()
    api.ensure_default_role()
    role = client.get_role(RoleName=DEFAULT_ROLE)["Role"]
    assert role["Arn"] == f"arn:aws:iam::123456789012:role/{DEFAULT_ROLE}"
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "sagemaker.amazonaws.com"}
    invoker = creds.add_key("invoke", "app")
    service = QueryService("iam", api.handlers(), Verifier(creds, region="us-east-1"))
    with pytest.raises(botocore.exceptions.ClientError) as denied:
        asgi_client(service, "iam", invoker).delete_role(RoleName=DEFAULT_ROLE)
    assert denied.value.response["Error"]["Code"] == "AccessDenied"
    assert denied.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    with pytest.raises(botocore.exceptions.ClientError) as other:
        client.create_user(UserName="bob")
    code, message = _code(other)
    assert code == "InvalidAction" and "CreateRole" in message
