"""IAM's roles on ``servekit up``'s port (the query protocol, signed for ``iam``): Create/Get/List/Delete Role,
Put/Get/List/Delete RolePolicy, Attach/Detach/ListAttached RolePolicies, Tag/Untag/ListRoleTags.

What the roles are for: a role's policies decide what a session of it may do (STS AssumeRole's, a job's, a
pipeline's, a transform run's: :func:`documents`); the SDK turns a role name into its ARN with GetRole. Policy
documents come back URL-encoded JSON, as IAM writes them (botocore decodes them into dicts). A policy document is
checked when it is put (:func:`servekit.aws.policy.check`): servekit evaluates exactly what it accepts.

``SageMakerRole`` (:data:`DEFAULT_ROLE`) is made with the home, trusted by SageMaker, with no policy: a role without
one allows what an execution role usually holds (docs/iam.md), so the SDK's ``role="SageMakerRole"`` works in a
new home as in an account set up for SageMaker.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

from servekit.aws.credentials import AccessKey, authorize
from servekit.aws.errors import ApiError
from servekit.aws.names import Account
from servekit.aws.offsets import offset_page
from servekit.aws.policy import Document, PolicyError, check
from servekit.aws.query import QueryHandler
from servekit.services.iam.managed import POLICIES
from servekit.services.iam.store import RoleExists, RoleRow, Roles

DEFAULT_ROLE = "SageMakerRole"
SAGEMAKER_TRUST = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Principal": {"Service": "sagemaker.amazonaws.com"}, "Action": "sts:AssumeRole"}],
}
MAX_INLINE_BYTES = 10240  # IAM's quota on a role's inline policies, all together (characters, whitespace aside)
MAX_ATTACHED = 20  # IAM's default quota of managed policies per role
_ID_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"


def no_such_entity(message: str) -> ApiError:
    return ApiError("NoSuchEntity", message, 404)


def malformed(message: str) -> ApiError:
    return ApiError("MalformedPolicyDocument", message, 400)


def _json_object(text: str, what: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except ValueError:
        raise malformed(f"This policy contains invalid Json: the {what} is not JSON") from None
    if not isinstance(doc, dict):
        raise malformed(f"Syntax errors in policy: the {what} must be a JSON object")
    return doc


def documents(roles: Roles, name: str) -> list[Document] | None:
    """The policy documents of the role ``name``: its inline policies and its attached managed ones (empty when it
    has none); None when IAM has no such role."""
    if roles.get(name) is None:
        return None
    docs: list[Document] = [json.loads(text) for _, text in roles.policies(name)]
    docs += [POLICIES[arn].document() for arn in roles.attached(name) if arn in POLICIES]
    return docs


class IamApi:
    def __init__(self, roles: Roles, account: Account) -> None:
        self.roles = roles
        self.account = account

    def handlers(self) -> dict[str, QueryHandler]:
        table: dict[str, Callable[[dict[str, Any]], Mapping[str, Any]]] = {
            "CreateRole": self.create_role,
            "GetRole": self.get_role,
            "ListRoles": self.list_roles,
            "DeleteRole": self.delete_role,
            "UpdateRole": self.update_role,
            "UpdateAssumeRolePolicy": self.update_assume_role_policy,
            "PutRolePolicy": self.put_role_policy,
            "GetRolePolicy": self.get_role_policy,
            "ListRolePolicies": self.list_role_policies,
            "DeleteRolePolicy": self.delete_role_policy,
            "AttachRolePolicy": self.attach_role_policy,
            "DetachRolePolicy": self.detach_role_policy,
            "ListAttachedRolePolicies": self.list_attached_role_policies,
        }
        return {action: self._authorized(action, handler) for action, handler in table.items()}

    def _authorized(self, action: str, handler: Callable[[dict[str, Any]], Mapping[str, Any]]) -> QueryHandler:
        def call(p: dict[str, Any], key: AccessKey | None) -> Mapping[str, Any]:
            if key is not None:
                resource = self.arn("/", p["RoleName"]) if "RoleName" in p else "*"
                authorize(key, "admin", f"iam:{action}", resource)
            return handler(p)

        return call

    # ---- roles ------------------------------------------------------------------------------------------------
    def arn(self, path: str, name: str) -> str:
        return f"arn:{self.account.partition}:iam::{self.account.account_id}:role{path}{name}"

    def _role(self, name: str) -> RoleRow:
        row = self.roles.get(name)
        if row is None:
            raise no_such_entity(f"The role with name {name} cannot be found.")
        return row

    def _shape(self, row: RoleRow, listed: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "Path": row.path,
            "RoleName": row.name,
            "RoleId": row.role_id,
            "Arn": self.arn(row.path, row.name),
            "CreateDate": row.created,
            "AssumeRolePolicyDocument": quote(row.trust_policy, safe=""),
            "MaxSessionDuration": row.max_session_s,
        }
        if row.description is not None:
            out["Description"] = row.description
        if not listed:
            if row.tags:
                out["Tags"] = row.tags
            out["RoleLastUsed"] = {}
        return out

    def create_role(self, p: dict[str, Any]) -> dict[str, Any]:
        if p.get("PermissionsBoundary"):
            raise ApiError("InvalidInput", "servekit does not apply permissions boundaries; leave it out", 400)
        trust = _json_object(p["AssumeRolePolicyDocument"], "AssumeRolePolicyDocument")
        if not trust.get("Statement"):
            raise malformed("Syntax errors in policy: the AssumeRolePolicyDocument has no Statement")
        role_id = "AROA" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(17))
        try:
            row = self.roles.create(
                p["RoleName"],
                role_id,
                p.get("Path", "/"),
                p["AssumeRolePolicyDocument"],
                p.get("Description"),
                int(p.get("MaxSessionDuration", 3600)),
                p.get("Tags", []),
            )
        except RoleExists:
            raise ApiError("EntityAlreadyExists", f"Role with name {p['RoleName']} already exists.", 409) from None
        return {"Role": self._shape(row)}

    def get_role(self, p: dict[str, Any]) -> dict[str, Any]:
        return {"Role": self._shape(self._role(p["RoleName"]))}

    def list_roles(self, p: dict[str, Any]) -> dict[str, Any]:
        rows = self.roles.listed(p.get("PathPrefix", "/"))
        return _page([self._shape(r, listed=True) for r in rows], "Roles", p)

    def delete_role(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._role(p["RoleName"])
        if self.roles.policies(row.name):
            raise ApiError("DeleteConflict", "Cannot delete entity, must delete policies first.", 409)
        if self.roles.attached(row.name):
            raise ApiError("DeleteConflict", "Cannot delete entity, must detach all policies first.", 409)
        self.roles.delete(row.name)
        return {}

    def update_role(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._role(p["RoleName"])
        self.roles.update(row.name, description=p.get("Description"), max_session_s=p.get("MaxSessionDuration"))
        return {}

    def update_assume_role_policy(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._role(p["RoleName"])
        trust = _json_object(p["PolicyDocument"], "PolicyDocument")
        if not trust.get("Statement"):
            raise malformed("Syntax errors in policy: the trust policy has no Statement")
        self.roles.update(row.name, trust_policy=p["PolicyDocument"])
        return {}

    # ---- inline policies ----------------------------------------------------------------------------------------
    def put_role_policy(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._role(p["RoleName"])
        doc = _json_object(p["PolicyDocument"], "PolicyDocument")
        try:
            check(doc)
        except PolicyError as exc:
            raise malformed(f"Syntax errors in policy: {exc}") from None
        others = sum(len("".join(d.split())) for n, d in self.roles.policies(row.name) if n != p["PolicyName"])
        if others + len("".join(p["PolicyDocument"].split())) > MAX_INLINE_BYTES:
            raise ApiError(
                "LimitExceeded", f"Maximum policy size of {MAX_INLINE_BYTES} bytes exceeded for role {row.name}", 409
            )
        self.roles.put_policy(row.name, p["PolicyName"], p["PolicyDocument"])
        return {}

    def get_role_policy(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._role(p["RoleName"])
        doc = self.roles.get_policy(row.name, p["PolicyName"])
        if doc is None:
            raise no_such_entity(f"The role policy with name {p['PolicyName']} cannot be found.")
        return {"RoleName": row.name, "PolicyName": p["PolicyName"], "PolicyDocument": quote(doc, safe="")}

    def list_role_policies(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._role(p["RoleName"])
        return _page([n for n, _ in self.roles.policies(row.name)], "PolicyNames", p)

    def delete_role_policy(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._role(p["RoleName"])
        if not self.roles.delete_policy(row.name, p["PolicyName"]):
            raise no_such_entity(f"The role policy with name {p['PolicyName']} cannot be found.")
        return {}

    # ---- managed policies ---------------------------------------------------------------------------------------
    def attach_role_policy(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._role(p["RoleName"])
        arn = p["PolicyArn"]
        if arn not in POLICIES:
            raise no_such_entity(
                f"Policy {arn} does not exist or is not attachable. servekit attaches these AWS managed policies: "
                + ", ".join(sorted(POLICIES))
            )
        attached = self.roles.attached(row.name)
        if arn not in attached and len(attached) >= MAX_ATTACHED:
            raise ApiError("LimitExceeded", f"Cannot exceed quota for PoliciesPerRole: {MAX_ATTACHED}", 409)
        self.roles.attach(row.name, arn)
        return {}

    def detach_role_policy(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._role(p["RoleName"])
        if not self.roles.detach(row.name, p["PolicyArn"]):
            raise no_such_entity(f"Policy {p['PolicyArn']} was not found.")
        return {}

    def list_attached_role_policies(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._role(p["RoleName"])
        prefix = p.get("PathPrefix", "/")
        items = [
            {"PolicyName": POLICIES[a].name, "PolicyArn": a}
            for a in self.roles.attached(row.name)
            if a in POLICIES and prefix == "/"
        ]
        return _page(items, "AttachedPolicies", p)

    def ensure_default_role(self) -> None:
        """Make :data:`DEFAULT_ROLE` when the home has none (a new home, or one from before IAM was served)."""
        if self.roles.get(DEFAULT_ROLE) is None:
            role_id = "AROA" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(17))
            description = "servekit's default SageMaker execution role"
            try:
                self.roles.create(DEFAULT_ROLE, role_id, "/", json.dumps(SAGEMAKER_TRUST), description, 3600, [])
            except RoleExists:  # another plane on the same database made it first
                pass


def _page(items: list[Any], member: str, p: Mapping[str, Any]) -> dict[str, Any]:
    """IAM's ``Marker``/``MaxItems`` paging over ``items`` (the marker is the next item's position, opaque to
    clients)."""
    try:
        page, marker = offset_page(items, p.get("Marker"), int(p.get("MaxItems", 100)))
    except ApiError:
        raise ApiError("ValidationError", f"Invalid Marker {p.get('Marker')!r}", 400) from None
    out: dict[str, Any] = {member: list(page), "IsTruncated": marker is not None}
    if marker is not None:
        out["Marker"] = marker
    return out
