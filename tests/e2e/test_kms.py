"""KMS on a real ``servekit up`` through boto3 (issue 45): a key, its alias and real encryption; a role's session
may use a key only as its policy allows; keys survive a restart of the plane (kept in the home)."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import botocore.exceptions
import pytest

from servekit.testing.hosting import UpProcess

pytestmark = pytest.mark.e2e
TRUST = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Principal": {"Service": "sagemaker.amazonaws.com"}, "Action": "sts:AssumeRole"}],
}


def test_keys_encrypt_for_whom_their_policy_allows_and_outlive_the_plane(tmp_path: Path) -> None:
    up = UpProcess(tmp_path / "home")
    up.start()
    try:
        kms = up.client("kms")
        key = kms.create_key(Description="artefacts")["KeyMetadata"]["Arn"]
        kms.create_alias(AliasName="alias/artefacts", TargetKeyId=key)
        blob = kms.encrypt(KeyId="alias/artefacts", Plaintext=b"weights", EncryptionContext={"m": "1"})[
            "CiphertextBlob"
        ]
        iam = up.client("iam")
        iam.create_role(RoleName="Decrypter", AssumeRolePolicyDocument=json.dumps(TRUST))
        only_decrypt = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "kms:Decrypt", "Resource": "*"}],
        }
        iam.put_role_policy(RoleName="Decrypter", PolicyName="d", PolicyDocument=json.dumps(only_decrypt))
        creds = up.client("sts").assume_role(
            RoleArn="arn:aws:iam::000000000000:role/Decrypter", RoleSessionName="reader"
        )["Credentials"]
        as_role = boto3.client(
            "kms", endpoint_url=up.url, region_name="us-east-1", aws_access_key_id=creds["AccessKeyId"],
            aws_secret_access_key=creds["SecretAccessKey"], aws_session_token=creds["SessionToken"],
        )  # fmt: skip
        assert as_role.decrypt(CiphertextBlob=blob, EncryptionContext={"m": "1"})["Plaintext"] == b"weights"
        with pytest.raises(botocore.exceptions.ClientError) as denied:
            as_role.encrypt(KeyId=key, Plaintext=b"x")
        assert denied.value.response["Error"]["Code"] == "AccessDeniedException"
    finally:
        up.stop()
    again = UpProcess(tmp_path / "home")  # the same home: the key, its alias and its material are there
    again.start()
    try:
        kms = again.client("kms")
        assert kms.describe_key(KeyId="alias/artefacts")["KeyMetadata"]["Arn"] == key
        assert kms.decrypt(CiphertextBlob=blob, EncryptionContext={"m": "1"})["Plaintext"] == b"weights"
    finally:
        again.stop()
