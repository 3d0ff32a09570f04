"""STS on ``servekit up``'s port, in STS's ``query`` protocol (:mod:`servekit.aws.query`): GetCallerIdentity and
AssumeRole; the other operations answer ``InvalidAction`` naming these.

AssumeRole mints a session of an IAM role of this account (:mod:`servekit.services.iam`) with
:class:`servekit.aws.sessions.SessionKeys`: an ``ASIA…`` key, its secret and token, until its ``Expiration``,
allowed what the role's policies allow (``policies``: the same rule a job's session follows). The account's own
keys (admin scope) answer GetCallerIdentity as the execution role ``SageMakerRole`` assumed, as a SageMaker
notebook's identity is, so the SDK's ``get_execution_role()`` finds a role; they may assume any of its roles (the
role's trust policy is kept, not evaluated); a session may when its policy allows ``sts:AssumeRole`` on the role.
Sessions live in the plane's memory: a restart ends them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from servekit.aws.credentials import AccessKey, authorize
from servekit.aws.errors import ApiError
from servekit.aws.names import Account
from servekit.aws.policy import Document
from servekit.aws.query import QueryHandler, QueryService, signed_for
from servekit.aws.sessions import SessionKeys
from servekit.aws.sigv4 import Verifier
from servekit.services.iam.api import DEFAULT_ROLE
from servekit.services.iam.store import Roles

is_sts_request = signed_for("sts")
_ROLE_ARN = re.compile(r"arn:(aws[a-z-]*):iam::(\d{12}):role(/(?:[^/]+/)*)([\w+=,.@-]+)")
RolePolicies = Callable[[str], Sequence[Document]]  # a role's ARN -> the documents its sessions are allowed by


class StsApi:
    def __init__(
        self,
        account: Account,
        roles: Roles | None = None,
        sessions: SessionKeys | None = None,
        policies: RolePolicies | None = None,
    ) -> None:
        self.account = account
        self.roles = roles
        self.sessions = sessions
        self.policies = policies

    def handlers(self) -> dict[str, QueryHandler]:
        out: dict[str, QueryHandler] = {"GetCallerIdentity": self.get_caller_identity}
        if self.roles is not None and self.sessions is not None and self.policies is not None:
            out["AssumeRole"] = self.assume_role
        return out

    def _caller(self, key: AccessKey | None) -> str:
        if key is not None and key.session_token is not None:
            return key.name
        who = (key.name or key.access_key_id) if key is not None else "servekit"
        return f"arn:{self.account.partition}:iam::{self.account.account_id}:user/{who}"

    def get_caller_identity(self, p: dict[str, Any], key: AccessKey | None) -> dict[str, Any]:
        if key is not None and key.session_token is not None:  # a role session: the assumed role, as AWS answers
            session = key.name.rsplit("/", 1)[-1]
            row = self.roles.get(key.role_arn.rsplit("/", 1)[-1]) if self.roles is not None else None
            return {
                "UserId": f"{row.role_id if row is not None else key.access_key_id}:{session}",
                "Account": self.account.account_id,
                "Arn": key.name,
            }
        execution = self.roles.get(DEFAULT_ROLE) if self.roles is not None and key is not None else None
        if key is not None and key.scope == "admin" and execution is not None:
            # the account's own keys act as a SageMaker notebook's identity: the execution role, assumed
            session = key.name or "servekit"
            return {
                "UserId": f"{execution.role_id}:{session}",
                "Account": self.account.account_id,
                "Arn": f"arn:{self.account.partition}:sts::{self.account.account_id}:assumed-role/"
                f"{execution.name}/{session}",
            }
        return {
            "UserId": key.access_key_id if key is not None else "servekit",
            "Account": self.account.account_id,
            "Arn": self._caller(key),
        }

    def assume_role(self, p: dict[str, Any], key: AccessKey | None) -> dict[str, Any]:
        assert self.roles is not None and self.sessions is not None and self.policies is not None
        arn = p["RoleArn"]
        who = self.get_caller_identity({}, key)["Arn"]
        message = f"User: {who} is not authorized to perform: sts:AssumeRole on resource: {arn}"
        denied = ApiError("AccessDenied", message, 403)
        match = _ROLE_ARN.fullmatch(arn)
        if match is None or match.group(2) != self.account.account_id:
            raise denied
        row = self.roles.get(match.group(4))
        if row is None or row.path != match.group(3) or row.name != match.group(4):
            raise denied
        if key is not None:
            try:
                authorize(key, "admin", "sts:AssumeRole", arn)
            except ApiError:
                raise denied from None
        if p.get("Policy") or p.get("PolicyArns"):
            raise ApiError(
                "ValidationError",
                "servekit does not apply session policies (Policy, PolicyArns): a session has its role's policies; "
                "assume a role whose policies are the ones you want",
                400,
            )
        duration = int(p.get("DurationSeconds", 3600))
        if duration > row.max_session_s:
            raise ApiError(
                "ValidationError",
                f"The requested DurationSeconds exceeds the MaxSessionDuration set for this role "
                f"({row.max_session_s} seconds).",
                400,
            )
        session = self.sessions.mint(arn, p["RoleSessionName"], self.policies(arn), duration)
        assert session.expires is not None
        return {
            "Credentials": {
                "AccessKeyId": session.access_key_id,
                "SecretAccessKey": session.secret_access_key,
                "SessionToken": session.session_token,
                "Expiration": int(session.expires),  # whole seconds, as STS writes it
            },
            "AssumedRoleUser": {"AssumedRoleId": f"{row.role_id}:{p['RoleSessionName']}", "Arn": session.name},
        }


def StsService(  # a class's name: what the plane and the tests have always built STS by
    account: Account,
    verifier: Verifier | None,
    roles: Roles | None = None,
    sessions: SessionKeys | None = None,
    policies: RolePolicies | None = None,
) -> QueryService:
    """STS as an ASGI app on the port (requests signed for ``sts``)."""
    return QueryService("sts", StsApi(account, roles, sessions, policies).handlers(), verifier)
