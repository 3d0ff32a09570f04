"""STS on ``servekit up``'s port, in STS's ``query`` protocol: a form body (``Action=GetCallerIdentity&Version=…``)
in, an XML ``<ActionResponse><ActionResult>…`` out, operations and output shapes from botocore's ``sts`` model.

Only GetCallerIdentity is answered (the account of the home, the calling key as an IAM user); the other STS
operations answer ``InvalidAction`` with what servekit does instead. Signatures are SigV4 with scope ``sts``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl

from botocore.model import StructureShape
from starlette.types import Receive, Scope, Send

from servekit.aws import xml
from servekit.aws.credentials import AccessKey
from servekit.aws.errors import ApiError
from servekit.aws.models import service_model
from servekit.aws.names import Account
from servekit.aws.protocol import request_id
from servekit.aws.sigv4 import Verifier

NAMESPACE = "https://sts.amazonaws.com/doc/2011-06-15/"
MAX_BODY = 64 * 1024


def is_sts_request(scope: Scope) -> bool:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            return b"/sts/aws4_request" in value
    return False


class StsService:
    def __init__(self, account: Account, verifier: Verifier | None) -> None:
        self.account = account
        self.verifier = verifier
        self.model = service_model("sts")

    def get_caller_identity(self, key: AccessKey | None) -> dict[str, Any]:
        if key is not None and key.session_token is not None:  # a role session: the assumed role, as AWS answers
            return {
                "UserId": f"{key.access_key_id}:{key.name.rsplit('/', 1)[-1]}",
                "Account": self.account.account_id,
                "Arn": key.name,
            }
        who = (key.name or key.access_key_id) if key is not None else "servekit"
        return {
            "UserId": key.access_key_id if key is not None else "servekit",
            "Account": self.account.account_id,
            "Arn": f"arn:{self.account.partition}:iam::{self.account.account_id}:user/{who}",
        }

    def handle(self, method: str, raw_path: str, headers: Mapping[str, str], body: bytes) -> tuple[int, bytes]:
        rid = request_id()
        try:
            if method != "POST":
                raise ApiError("InvalidAction", "STS takes POST requests with a form body", 400)
            key = self.verifier.verify(method, raw_path, headers, body, "sts", 403) if self.verifier else None
            form = dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
            action = form.get("Action", "")
            if action not in self.model.operation_names:
                raise ApiError("InvalidAction", f"Could not find operation {action!r} for version 2011-06-15", 400)
            if action != "GetCallerIdentity":
                raise ApiError(
                    "InvalidAction",
                    f"servekit's STS answers GetCallerIdentity only, not {action}; the keys of `servekit env` need "
                    "no session credentials",
                    400,
                )
            op = self.model.operation_model(action)
            shape = op.output_shape
            assert isinstance(shape, StructureShape)
            result = self.get_caller_identity(key)
            inner = xml.document(f"{action}Result", shape, result).split(b"\n", 1)[1]
            body_out = (
                f'<?xml version="1.0" encoding="UTF-8"?>\n<{action}Response xmlns="{NAMESPACE}">'.encode()
                + inner
                + f"<ResponseMetadata><RequestId>{rid}</RequestId></ResponseMetadata></{action}Response>".encode()
            )
            return 200, body_out
        except ApiError as exc:
            code = {
                "InvalidSignatureException": "SignatureDoesNotMatch",
                "UnrecognizedClientException": "InvalidClientTokenId",
                "MissingAuthenticationTokenException": "MissingAuthenticationToken",
                "IncompleteSignatureException": "IncompleteSignature",
            }.get(exc.code, exc.code)
            err = xml.element("Error", {"Type": "Sender", "Code": code, "Message": exc.message}).split(b"\n", 1)[1]
            doc = (
                f'<?xml version="1.0" encoding="UTF-8"?>\n<ErrorResponse xmlns="{NAMESPACE}">'.encode()
                + err
                + f"<RequestId>{rid}</RequestId></ErrorResponse>".encode()
            )
            return exc.status or 400, doc

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        chunks: list[bytes] = []
        size, more = 0, True
        while more:
            message = await receive()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY:
                status, body = 413, b""
                break
            chunks.append(chunk)
            more = message.get("more_body", False)
        else:
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            raw = scope.get("raw_path", b"").decode("latin-1") or scope["path"]
            if scope.get("query_string"):
                raw += "?" + scope["query_string"].decode("latin-1")
            status, body = self.handle(scope["method"], raw, headers, b"".join(chunks))
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"text/xml"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})
