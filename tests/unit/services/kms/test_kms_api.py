"""KMS through real botocore clients (in process, signed, validated against botocore's ``kms`` model, outputs
checked against its shapes), on a real SQLite state database with an injected clock (issue 45): keys and aliases as
the SageMaker SDK's integration tests make and find them, real encryption with encryption contexts, data keys,
key states, the deletion window, AWS's error codes and messages."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest

from servekit.aws import Api, Call, Credentials
from servekit.aws.names import Account
from servekit.services.database import StateDB
from servekit.services.kms.api import KmsApi
from servekit.services.kms.crypto import MASTER, Master
from servekit.services.kms.store import Keys
from servekit.testing.aws import in_process_client

T0 = 1_700_000_000.0
POLICY = json.dumps({
    "Version": "2012-10-17", "Id": "default",
    "Statement": [{"Sid": "Enable IAM User Permissions", "Effect": "Allow",
                   "Principal": {"AWS": ["000000000000"]}, "Action": "kms:*", "Resource": "*"}],
})  # fmt: skip


class Plane:
    def __init__(self, home: Path) -> None:
        self.now = T0
        self.home = home
        self.keys = Keys(StateDB.open(home).conn, lambda: self.now)
        self.api = KmsApi(self.keys, Master(home), Account())
        self.handlers = self.api.handlers()
        creds = Credentials.load_or_create(home)
        self.client = in_process_client(
            Api(creds, services=("kms",), strict_output=True), "kms", creds.admin, self.dispatch
        )

    def dispatch(self, call: Call) -> Mapping[str, Any] | None:
        async def run() -> Mapping[str, Any]:
            return await self.handlers[call.operation](call.params)

        return asyncio.run(run())


@pytest.fixture
def plane(tmp_path: Path) -> Plane:
    return Plane(tmp_path)


def _error(exc: pytest.ExceptionInfo[botocore.exceptions.ClientError]) -> tuple[str, str]:
    return exc.value.response["Error"]["Code"], exc.value.response["Error"]["Message"]


def test_the_sdks_key_is_made_found_by_its_alias_and_its_policy_kept(plane: Plane) -> None:
    kms = plane.client
    with pytest.raises(kms.exceptions.NotFoundException) as missing:  # what kms_utils catches
        kms.describe_key(KeyId="alias/SageMakerTestKMSKey")
    assert _error(missing)[1] == ("Alias arn:aws:kms:us-east-1:000000000000:alias/SageMakerTestKMSKey is not found.")
    made = kms.create_key(Policy=POLICY, Description="KMS key for SageMaker Python SDK integ tests")["KeyMetadata"]
    assert made["Arn"] == f"arn:aws:kms:us-east-1:000000000000:key/{made['KeyId']}"
    assert (made["KeyState"], made["Enabled"], made["KeySpec"], made["KeyManager"]) == (
        "Enabled", True, "SYMMETRIC_DEFAULT", "CUSTOMER",
    )  # fmt: skip
    kms.create_alias(AliasName="alias/SageMakerTestKMSKey", TargetKeyId=made["Arn"])
    for name in ("alias/SageMakerTestKMSKey", "arn:aws:kms:us-east-1:000000000000:alias/SageMakerTestKMSKey",
                 made["KeyId"], made["Arn"]):  # fmt: skip
        assert kms.describe_key(KeyId=name)["KeyMetadata"]["KeyId"] == made["KeyId"]
    assert json.loads(kms.get_key_policy(KeyId=made["KeyId"], PolicyName="default")["Policy"]) == json.loads(POLICY)
    kms.put_key_policy(KeyId=made["KeyId"], PolicyName="default", Policy=POLICY.replace("000000000000", "1" * 12))
    assert "111111111111" in kms.get_key_policy(KeyId=made["KeyId"], PolicyName="default")["Policy"]
    with pytest.raises(kms.exceptions.MalformedPolicyDocumentException):
        kms.put_key_policy(KeyId=made["KeyId"], PolicyName="default", Policy="{not json")
    with pytest.raises(kms.exceptions.AlreadyExistsException):
        kms.create_alias(AliasName="alias/SageMakerTestKMSKey", TargetKeyId=made["KeyId"])
    aliases = kms.list_aliases(KeyId=made["KeyId"])["Aliases"]
    assert [(a["AliasName"], a["TargetKeyId"]) for a in aliases] == [("alias/SageMakerTestKMSKey", made["KeyId"])]
    assert [k["KeyId"] for k in kms.list_keys()["Keys"]] == [made["KeyId"]]


def test_encryption_is_real_and_bound_to_its_key_and_context(plane: Plane) -> None:
    kms = plane.client
    key = kms.create_key()["KeyMetadata"]["KeyId"]
    other = kms.create_key()["KeyMetadata"]["KeyId"]
    context = {"purpose": "test", "job": "j1"}
    out = kms.encrypt(KeyId=key, Plaintext=b"the secret", EncryptionContext=context)
    blob = out["CiphertextBlob"]
    assert b"the secret" not in blob and out["EncryptionAlgorithm"] == "SYMMETRIC_DEFAULT"
    back = kms.decrypt(CiphertextBlob=blob, EncryptionContext=dict(reversed(list(context.items()))))
    assert back["Plaintext"] == b"the secret" and back["KeyId"].endswith(key)
    with pytest.raises(kms.exceptions.InvalidCiphertextException):
        kms.decrypt(CiphertextBlob=blob, EncryptionContext={"purpose": "other"})
    with pytest.raises(kms.exceptions.InvalidCiphertextException):
        kms.decrypt(CiphertextBlob=blob[:-1] + bytes([blob[-1] ^ 1]), EncryptionContext=context)
    with pytest.raises(kms.exceptions.IncorrectKeyException):
        kms.decrypt(CiphertextBlob=blob, EncryptionContext=context, KeyId=other)
    again = kms.re_encrypt(CiphertextBlob=blob, SourceEncryptionContext=context, DestinationKeyId=other)
    assert kms.decrypt(CiphertextBlob=again["CiphertextBlob"])["Plaintext"] == b"the secret"
    data = kms.generate_data_key(KeyId=key, KeySpec="AES_256")
    assert len(data["Plaintext"]) == 32
    assert kms.decrypt(CiphertextBlob=data["CiphertextBlob"])["Plaintext"] == data["Plaintext"]
    bare = kms.generate_data_key_without_plaintext(KeyId=key, NumberOfBytes=16)
    assert "Plaintext" not in bare and len(kms.decrypt(CiphertextBlob=bare["CiphertextBlob"])["Plaintext"]) == 16
    # the material is wrapped under the home's master key: without it, the database alone opens nothing
    (plane.home / MASTER).write_bytes(b"\0" * 32)
    fresh = KmsApi(plane.keys, Master(plane.home), Account())
    with pytest.raises(Exception, match="does not open"):
        fresh.decrypt({"CiphertextBlob": blob, "EncryptionContext": context})


def test_disabled_and_deleted_keys_refuse_with_their_state(plane: Plane) -> None:
    kms = plane.client
    key = kms.create_key()["KeyMetadata"]["KeyId"]
    blob = kms.encrypt(KeyId=key, Plaintext=b"x")["CiphertextBlob"]
    kms.disable_key(KeyId=key)
    with pytest.raises(kms.exceptions.DisabledException) as disabled:
        kms.decrypt(CiphertextBlob=blob)
    assert _error(disabled)[1] == f"arn:aws:kms:us-east-1:000000000000:key/{key} is disabled."
    kms.enable_key(KeyId=key)
    kms.create_alias(AliasName="alias/doomed", TargetKeyId=key)
    out = kms.schedule_key_deletion(KeyId=key, PendingWindowInDays=7)
    assert out["KeyState"] == "PendingDeletion" and out["PendingWindowInDays"] == 7
    meta = kms.describe_key(KeyId=key)["KeyMetadata"]
    assert meta["KeyState"] == "PendingDeletion" and meta["DeletionDate"].timestamp() == T0 + 7 * 86400
    with pytest.raises(kms.exceptions.KMSInvalidStateException):
        kms.encrypt(KeyId=key, Plaintext=b"x")
    kms.cancel_key_deletion(KeyId=key)
    assert kms.describe_key(KeyId=key)["KeyMetadata"]["KeyState"] == "Disabled"  # as AWS leaves it
    kms.schedule_key_deletion(KeyId=key, PendingWindowInDays=7)
    plane.now += 7 * 86400  # the window has passed: the key and its alias are gone
    with pytest.raises(kms.exceptions.NotFoundException) as gone:
        kms.describe_key(KeyId=key)
    assert _error(gone)[1] == f"Key 'arn:aws:kms:us-east-1:000000000000:key/{key}' does not exist"
    with pytest.raises(kms.exceptions.NotFoundException):
        kms.describe_key(KeyId="alias/doomed")
    with pytest.raises(kms.exceptions.NotFoundException):
        kms.decrypt(CiphertextBlob=blob)


def test_aws_managed_keys_are_made_on_first_use_and_not_changed(plane: Plane) -> None:
    kms = plane.client
    meta = kms.describe_key(KeyId="alias/aws/s3")["KeyMetadata"]
    assert meta["KeyManager"] == "AWS"
    assert kms.describe_key(KeyId="alias/aws/s3")["KeyMetadata"]["KeyId"] == meta["KeyId"]  # the same one after
    with pytest.raises(kms.exceptions.UnsupportedOperationException):
        kms.disable_key(KeyId=meta["KeyId"])
    with pytest.raises(botocore.exceptions.ClientError) as reserved:
        kms.create_alias(AliasName="alias/aws/mine", TargetKeyId=kms.create_key()["KeyMetadata"]["KeyId"])
    assert _error(reserved)[0] == "NotAuthorizedException"


def test_bad_names_and_unsupported_keys_get_kmss_errors(plane: Plane) -> None:
    kms = plane.client
    with pytest.raises(kms.exceptions.NotFoundException) as bad:
        kms.describe_key(KeyId="not-a-key")
    assert _error(bad)[1] == "Invalid keyId 'not-a-key'"
    with pytest.raises(kms.exceptions.NotFoundException):
        kms.describe_key(KeyId="arn:aws:kms:eu-west-1:000000000000:key/" + "0" * 8 + "-0000-0000-0000-" + "0" * 12)
    with pytest.raises(kms.exceptions.UnsupportedOperationException) as asym:
        kms.create_key(KeySpec="RSA_2048", KeyUsage="SIGN_VERIFY")
    assert "symmetric encryption keys only" in _error(asym)[1]
    with pytest.raises(kms.exceptions.InvalidCiphertextException):
        kms.decrypt(CiphertextBlob=b"not a ciphertext of ours at all, long enough to parse")
