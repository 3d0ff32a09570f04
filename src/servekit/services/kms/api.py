"""KMS on ``servekit up``'s port (AWS JSON 1.1, ``TrentService``): symmetric keys made and kept in the home, their
aliases, key policies and tags, and real encryption (:mod:`servekit.services.kms.crypto`).

A key is named by its id, its ARN, ``alias/<name>`` or the alias's ARN. ``alias/aws/<service>`` names an AWS managed
key, made the first time it is named (as AWS makes ``aws/s3`` on first use). A disabled key refuses cryptographic
operations (``DisabledException``); one scheduled for deletion refuses them too (``KMSInvalidStateException``) and
is deleted, with its aliases, once its waiting period has passed. Key policies are kept and returned (they must be
JSON policy documents), not evaluated: what a key may be used for is decided by the caller's own policy
(``kms:<Operation>``), as for every service on the port. docs/kms.md says the rest.
"""

from __future__ import annotations

import json
import re
import secrets
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from servekit.aws.errors import ApiError
from servekit.aws.front import Handler
from servekit.aws.names import Account
from servekit.aws.offsets import offset_page
from servekit.services.kms import crypto
from servekit.services.kms.store import AliasExists, KeyRow, Keys

ALGORITHM = "SYMMETRIC_DEFAULT"
DAY_S = 86400.0
_KEY_ARN = re.compile(r"arn:aws[a-z-]*:kms:([a-z0-9-]+):(\d{12}):key/([0-9a-f-]{36})")
_ALIAS_ARN = re.compile(r"arn:aws[a-z-]*:kms:([a-z0-9-]+):(\d{12}):(alias/.+)")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
DATA_KEY_BYTES = {"AES_256": 32, "AES_128": 16}


def _error(code: str, message: str) -> ApiError:
    return ApiError(code, message, 400)


def not_found(message: str) -> ApiError:
    return _error("NotFoundException", message)


class KmsApi:
    def __init__(self, keys: Keys, master: crypto.Master, account: Account) -> None:
        self.keys = keys
        self.master = master
        self.account = account

    def handlers(self) -> dict[str, Handler]:
        table: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "CreateKey": self.create_key,
            "DescribeKey": self.describe_key,
            "ListKeys": self.list_keys,
            "EnableKey": self.enable_key,
            "DisableKey": self.disable_key,
            "ScheduleKeyDeletion": self.schedule_key_deletion,
            "CancelKeyDeletion": self.cancel_key_deletion,
            "UpdateKeyDescription": self.update_key_description,
            "GetKeyPolicy": self.get_key_policy,
            "PutKeyPolicy": self.put_key_policy,
            "ListKeyPolicies": self.list_key_policies,
            "CreateAlias": self.create_alias,
            "UpdateAlias": self.update_alias,
            "DeleteAlias": self.delete_alias,
            "ListAliases": self.list_aliases,
            "TagResource": self.tag_resource,
            "UntagResource": self.untag_resource,
            "ListResourceTags": self.list_resource_tags,
            "Encrypt": self.encrypt,
            "Decrypt": self.decrypt,
            "ReEncrypt": self.re_encrypt,
            "GenerateDataKey": self.generate_data_key,
            "GenerateDataKeyWithoutPlaintext": self.generate_data_key_without_plaintext,
            "GenerateRandom": self.generate_random,
        }

        def wrap(f: Callable[[dict[str, Any]], dict[str, Any]]) -> Handler:
            async def call(p: dict[str, Any]) -> dict[str, Any]:
                return f(p)

            return call

        return {name: wrap(f) for name, f in table.items()}

    # ---- names ------------------------------------------------------------------------------------------------
    def key_arn(self, key_id: str) -> str:
        return f"arn:{self.account.partition}:kms:{self.account.region}:{self.account.account_id}:key/{key_id}"

    def alias_arn(self, name: str) -> str:
        return f"arn:{self.account.partition}:kms:{self.account.region}:{self.account.account_id}:{name}"

    def _ours(self, region: str, account: str) -> bool:
        return region == self.account.region and account == self.account.account_id

    def _live(self, row: KeyRow | None) -> KeyRow | None:
        """``row``, or None once its deletion date has passed (then it is deleted, its aliases with it)."""
        if row is not None and row.state == "PendingDeletion" and row.deletion_date is not None:
            if row.deletion_date <= self.keys.clock():
                self.keys.delete(row.key_id)
                return None
        return row

    def _aws_managed(self, name: str) -> KeyRow:
        """The AWS managed key ``alias/aws/<service>``, made on first use."""
        key_id = str(uuid.uuid4())
        service = name.removeprefix("alias/aws/")
        material = self.master.wrap(crypto.new_material(), key_id)
        row = self.keys.create(key_id, f"Default key that protects my {service} data when no other key is defined",
                               json.dumps(self._default_policy()), [], material, manager="AWS")  # fmt: skip
        try:
            self.keys.create_alias(name, key_id)
        except AliasExists:  # another request made it first: use that one
            self.keys.delete(key_id)
            found = self.keys.alias(name)
            assert found is not None
            existing = self.keys.get(found.key_id)
            assert existing is not None
            return existing
        return row

    def resolve(self, key_id: str) -> KeyRow:
        """The key ``key_id`` names (an id, a key ARN, an alias name or an alias ARN)."""
        name = key_id
        match = _ALIAS_ARN.fullmatch(key_id)
        if match is not None:
            if not self._ours(match.group(1), match.group(2)):
                raise not_found(f"Alias {key_id} is not found.")
            name = match.group(3)
        if name.startswith("alias/"):
            alias = self.keys.alias(name)
            if alias is None:
                if name.startswith("alias/aws/") and len(name) > len("alias/aws/"):
                    return self._aws_managed(name)
                raise not_found(f"Alias {self.alias_arn(name)} is not found.")
            row = self._live(self.keys.get(alias.key_id))
            if row is None:
                raise not_found(f"Alias {self.alias_arn(name)} is not found.")
            return row
        match = _KEY_ARN.fullmatch(key_id)
        if match is not None:
            if not self._ours(match.group(1), match.group(2)):
                raise not_found(f"Key '{key_id}' does not exist")
            key_id = match.group(3)
        elif _UUID.fullmatch(key_id) is None:
            raise not_found(f"Invalid keyId '{key_id}'")
        row = self._live(self.keys.get(key_id))
        if row is None:
            raise not_found(f"Key '{self.key_arn(key_id)}' does not exist")
        return row

    def _usable(self, key_id: str) -> KeyRow:
        """The key, if it may encrypt and decrypt now."""
        row = self.resolve(key_id)
        if row.state == "Disabled":
            raise _error("DisabledException", f"{self.key_arn(row.key_id)} is disabled.")
        if row.state == "PendingDeletion":
            raise _error("KMSInvalidStateException", f"{self.key_arn(row.key_id)} is pending deletion.")
        return row

    def usable_arn(self, key_id: str) -> str:
        """The ARN of the key ``key_id`` names, if it may encrypt now (another service's use: S3's ``aws:kms``)."""
        return self.key_arn(self._usable(key_id).key_id)

    def _customer(self, key_id: str) -> KeyRow:
        """The key, if it is a customer managed one (AWS managed keys cannot be changed)."""
        row = self.resolve(key_id)
        if row.manager != "CUSTOMER":
            raise _error("UnsupportedOperationException", f"{self.key_arn(row.key_id)} is an AWS managed key.")
        return row

    def _default_policy(self) -> dict[str, Any]:
        return {
            "Version": "2012-10-17",
            "Id": "key-default-1",
            "Statement": [
                {
                    "Sid": "Enable IAM User Permissions",
                    "Effect": "Allow",
                    "Principal": {"AWS": f"arn:{self.account.partition}:iam::{self.account.account_id}:root"},
                    "Action": "kms:*",
                    "Resource": "*",
                }
            ],
        }

    def metadata(self, row: KeyRow) -> dict[str, Any]:
        out: dict[str, Any] = {
            "AWSAccountId": self.account.account_id,
            "KeyId": row.key_id,
            "Arn": self.key_arn(row.key_id),
            "CreationDate": row.created,
            "Enabled": row.state == "Enabled",
            "Description": row.description,
            "KeyUsage": "ENCRYPT_DECRYPT",
            "KeyState": row.state,
            "Origin": "AWS_KMS",
            "KeyManager": row.manager,
            "CustomerMasterKeySpec": ALGORITHM,
            "KeySpec": ALGORITHM,
            "EncryptionAlgorithms": [ALGORITHM],
            "MultiRegion": False,
        }
        if row.state == "PendingDeletion":
            out["DeletionDate"] = row.deletion_date
            out["PendingDeletionWindowInDays"] = row.pending_days
        return out

    # ---- keys -------------------------------------------------------------------------------------------------
    def create_key(self, p: dict[str, Any]) -> dict[str, Any]:
        spec = p.get("KeySpec") or p.get("CustomerMasterKeySpec") or ALGORITHM
        usage = p.get("KeyUsage", "ENCRYPT_DECRYPT")
        if spec != ALGORITHM or usage != "ENCRYPT_DECRYPT":
            raise _error(
                "UnsupportedOperationException",
                f"servekit's KMS makes symmetric encryption keys only (KeySpec SYMMETRIC_DEFAULT, KeyUsage "
                f"ENCRYPT_DECRYPT), not {spec} for {usage}",
            )
        if p.get("Origin", "AWS_KMS") != "AWS_KMS" or p.get("CustomKeyStoreId") or p.get("MultiRegion"):
            raise _error("UnsupportedOperationException", "servekit's KMS makes keys of origin AWS_KMS in one region")
        policy = p.get("Policy")
        if policy is not None:
            self._check_policy(policy)
        key_id = str(uuid.uuid4())
        material = self.master.wrap(crypto.new_material(), key_id)
        row = self.keys.create(
            key_id, p.get("Description", ""), policy or json.dumps(self._default_policy()), p.get("Tags", []), material
        )
        return {"KeyMetadata": self.metadata(row)}

    def describe_key(self, p: dict[str, Any]) -> dict[str, Any]:
        return {"KeyMetadata": self.metadata(self.resolve(p["KeyId"]))}

    def list_keys(self, p: dict[str, Any]) -> dict[str, Any]:
        rows = [r for r in map(self._live, self.keys.listed()) if r is not None]
        items = [{"KeyId": r.key_id, "KeyArn": self.key_arn(r.key_id)} for r in rows]
        return _page(items, "Keys", p)

    def enable_key(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._customer(p["KeyId"])
        self._not_pending(row)
        self.keys.update(row.key_id, state="Enabled")
        return {}

    def disable_key(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._customer(p["KeyId"])
        self._not_pending(row)
        self.keys.update(row.key_id, state="Disabled")
        return {}

    def _not_pending(self, row: KeyRow) -> None:
        if row.state == "PendingDeletion":
            raise _error("KMSInvalidStateException", f"{self.key_arn(row.key_id)} is pending deletion.")

    def schedule_key_deletion(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._customer(p["KeyId"])
        self._not_pending(row)
        days = int(p.get("PendingWindowInDays", 30))
        when = self.keys.clock() + days * DAY_S
        self.keys.update(row.key_id, state="PendingDeletion", deletion_date=when, pending_days=days)
        return {
            "KeyId": self.key_arn(row.key_id),
            "DeletionDate": when,
            "KeyState": "PendingDeletion",
            "PendingWindowInDays": days,
        }

    def cancel_key_deletion(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._customer(p["KeyId"])
        if row.state != "PendingDeletion":
            raise _error("KMSInvalidStateException", f"{self.key_arn(row.key_id)} is not pending deletion.")
        self.keys.update(row.key_id, state="Disabled", deletion_date=None, pending_days=None)  # as AWS leaves it
        return {"KeyId": self.key_arn(row.key_id)}

    def update_key_description(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._customer(p["KeyId"])
        self.keys.update(row.key_id, description=p["Description"])
        return {}

    # ---- key policies -----------------------------------------------------------------------------------------
    def _check_policy(self, policy: str) -> None:
        try:
            doc = json.loads(policy)
        except ValueError:
            raise _error("MalformedPolicyDocumentException", "The new key policy is not valid JSON.") from None
        if not isinstance(doc, dict) or not doc.get("Statement"):
            raise _error("MalformedPolicyDocumentException", "The new key policy must be an object with a Statement.")

    def _policy_name(self, p: Mapping[str, Any]) -> None:
        if p.get("PolicyName", "default") != "default":
            raise not_found(f"No such policy exists: {p['PolicyName']} (a key has one policy, named default)")

    def get_key_policy(self, p: dict[str, Any]) -> dict[str, Any]:
        self._policy_name(p)
        row = self.resolve(p["KeyId"])
        return {"Policy": row.policy, "PolicyName": "default"}

    def put_key_policy(self, p: dict[str, Any]) -> dict[str, Any]:
        self._policy_name(p)
        row = self._customer(p["KeyId"])
        self._check_policy(p["Policy"])
        self.keys.update(row.key_id, policy=p["Policy"])
        return {}

    def list_key_policies(self, p: dict[str, Any]) -> dict[str, Any]:
        self.resolve(p["KeyId"])
        return {"PolicyNames": ["default"], "Truncated": False}

    # ---- aliases ----------------------------------------------------------------------------------------------
    def _alias_name(self, name: str) -> None:
        if not name.startswith("alias/") or name.startswith("alias/aws/"):
            raise _error(
                "InvalidAliasNameException" if not name.startswith("alias/aws/") else "NotAuthorizedException",
                f"{name} is not a name you may give an alias: it starts with alias/ and not alias/aws/",
            )

    def create_alias(self, p: dict[str, Any]) -> dict[str, Any]:
        name = p["AliasName"]
        self._alias_name(name)
        row = self._customer(p["TargetKeyId"])
        try:
            self.keys.create_alias(name, row.key_id)
        except AliasExists:
            raise _error(
                "AlreadyExistsException", f"An alias with the name {self.alias_arn(name)} already exists"
            ) from None
        return {}

    def update_alias(self, p: dict[str, Any]) -> dict[str, Any]:
        name = p["AliasName"]
        self._alias_name(name)
        row = self._customer(p["TargetKeyId"])
        if not self.keys.point_alias(name, row.key_id):
            raise not_found(f"Alias {self.alias_arn(name)} is not found.")
        return {}

    def delete_alias(self, p: dict[str, Any]) -> dict[str, Any]:
        name = p["AliasName"]
        self._alias_name(name)
        if not self.keys.delete_alias(name):
            raise not_found(f"Alias {self.alias_arn(name)} is not found.")
        return {}

    def list_aliases(self, p: dict[str, Any]) -> dict[str, Any]:
        key_id = self.resolve(p["KeyId"]).key_id if p.get("KeyId") else None
        items = [
            {
                "AliasName": a.name,
                "AliasArn": self.alias_arn(a.name),
                "TargetKeyId": a.key_id,
                "CreationDate": a.created,
                "LastUpdatedDate": a.updated,
            }
            for a in self.keys.aliases(key_id)
            if self._live(self.keys.get(a.key_id)) is not None
        ]
        return _page(items, "Aliases", p)

    # ---- tags -------------------------------------------------------------------------------------------------
    def tag_resource(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._customer(p["KeyId"])
        tags = {t["TagKey"]: t["TagValue"] for t in row.tags}
        tags.update({t["TagKey"]: t["TagValue"] for t in p["Tags"]})
        self.keys.update(row.key_id, tags=[{"TagKey": k, "TagValue": v} for k, v in tags.items()])
        return {}

    def untag_resource(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._customer(p["KeyId"])
        gone = set(p["TagKeys"])
        self.keys.update(row.key_id, tags=[t for t in row.tags if t["TagKey"] not in gone])
        return {}

    def list_resource_tags(self, p: dict[str, Any]) -> dict[str, Any]:
        return _page(list(self.resolve(p["KeyId"]).tags), "Tags", p)

    # ---- cryptography -----------------------------------------------------------------------------------------
    def _algorithm(self, p: Mapping[str, Any], member: str = "EncryptionAlgorithm") -> None:
        if p.get(member, ALGORITHM) != ALGORITHM:
            raise _error("InvalidKeyUsageException", f"{member} {p[member]} is not supported by a symmetric key")

    def _material(self, row: KeyRow) -> bytes:
        try:
            return self.master.unwrap(row.material, row.key_id)
        except crypto.MasterKeyError as exc:  # the plane's problem, not the request's: said, as AWS's 500 is
            raise ApiError("KMSInternalException", str(exc), 500) from None

    def _dry_run(self, p: Mapping[str, Any]) -> None:
        if p.get("DryRun"):
            raise _error("DryRunOperationException", "The request would have succeeded, but the DryRun flag is set.")

    def encrypt(self, p: dict[str, Any]) -> dict[str, Any]:
        self._algorithm(p)
        row = self._usable(p["KeyId"])
        self._dry_run(p)
        blob = crypto.encrypt(self._material(row), row.key_id, p["Plaintext"], p.get("EncryptionContext"))
        return {"CiphertextBlob": blob, "KeyId": self.key_arn(row.key_id), "EncryptionAlgorithm": ALGORITHM}

    def _open(self, blob: bytes, key_id: str | None, context: Mapping[str, str] | None) -> tuple[KeyRow, bytes]:
        try:
            named = crypto.key_id_of(blob)
        except crypto.BadCiphertext:
            raise _error("InvalidCiphertextException", "The ciphertext is not one this KMS made.") from None
        row = self._usable(named)
        if key_id is not None and self.resolve(key_id).key_id != row.key_id:
            raise _error("IncorrectKeyException", "The key ID in the request does not identify the key that "
                         "encrypted the ciphertext.")  # fmt: skip
        try:
            return row, crypto.decrypt(self._material(row), blob, context)
        except crypto.BadCiphertext:
            raise _error(
                "InvalidCiphertextException",
                "The ciphertext was altered, or the encryption context is not the one it was encrypted with.",
            ) from None

    def decrypt(self, p: dict[str, Any]) -> dict[str, Any]:
        self._algorithm(p)
        row, plaintext = self._open(p["CiphertextBlob"], p.get("KeyId"), p.get("EncryptionContext"))
        self._dry_run(p)
        return {"KeyId": self.key_arn(row.key_id), "Plaintext": plaintext, "EncryptionAlgorithm": ALGORITHM}

    def re_encrypt(self, p: dict[str, Any]) -> dict[str, Any]:
        self._algorithm(p, "SourceEncryptionAlgorithm")
        self._algorithm(p, "DestinationEncryptionAlgorithm")
        source, plaintext = self._open(p["CiphertextBlob"], p.get("SourceKeyId"), p.get("SourceEncryptionContext"))
        target = self._usable(p["DestinationKeyId"])
        self._dry_run(p)
        context = p.get("DestinationEncryptionContext")
        return {
            "CiphertextBlob": crypto.encrypt(self._material(target), target.key_id, plaintext, context),
            "SourceKeyId": self.key_arn(source.key_id),
            "KeyId": self.key_arn(target.key_id),
            "SourceEncryptionAlgorithm": ALGORITHM,
            "DestinationEncryptionAlgorithm": ALGORITHM,
        }

    def _data_key(self, p: Mapping[str, Any]) -> tuple[KeyRow, bytes, bytes]:
        if ("KeySpec" in p) == ("NumberOfBytes" in p):
            raise _error("ValidationException", "Give KeySpec or NumberOfBytes (one of them).")
        size = DATA_KEY_BYTES[p["KeySpec"]] if "KeySpec" in p else int(p["NumberOfBytes"])
        row = self._usable(p["KeyId"])
        self._dry_run(p)
        plaintext = secrets.token_bytes(size)
        blob = crypto.encrypt(self._material(row), row.key_id, plaintext, p.get("EncryptionContext"))
        return row, plaintext, blob

    def generate_data_key(self, p: dict[str, Any]) -> dict[str, Any]:
        if p.get("Recipient"):
            raise _error("UnsupportedOperationException", "servekit's KMS has no Nitro enclave attestation (Recipient)")
        row, plaintext, blob = self._data_key(p)
        return {"CiphertextBlob": blob, "Plaintext": plaintext, "KeyId": self.key_arn(row.key_id)}

    def generate_data_key_without_plaintext(self, p: dict[str, Any]) -> dict[str, Any]:
        row, _, blob = self._data_key(p)
        return {"CiphertextBlob": blob, "KeyId": self.key_arn(row.key_id)}

    def generate_random(self, p: dict[str, Any]) -> dict[str, Any]:
        if p.get("CustomKeyStoreId") or p.get("Recipient"):
            raise _error("UnsupportedOperationException", "servekit's KMS has no custom key stores or enclaves")
        return {"Plaintext": secrets.token_bytes(int(p.get("NumberOfBytes", 32)))}


def _page(items: list[Any], member: str, p: Mapping[str, Any]) -> dict[str, Any]:
    """KMS's ``Limit``/``Marker`` paging (the marker is the next item's position, opaque to clients)."""
    try:
        page, marker = offset_page(items, p.get("Marker"), int(p.get("Limit", 100)))
    except ApiError:
        raise _error("InvalidMarkerException", "The request was rejected because the marker is not valid.") from None
    out: dict[str, Any] = {member: list(page), "Truncated": marker is not None}
    if marker is not None:
        out["NextMarker"] = marker
    return out
