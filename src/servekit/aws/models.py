"""botocore's installed service models, read once: the source of truth for operations, shapes and errors.

A :class:`ServiceSpec` is what the wire layer needs to know about one service: the protocol botocore will
actually speak to it (``resolved_protocol``: CloudWatch lists CBOR first, but botocore 1.43 sends AWS JSON
1.0), the ``X-Amz-Target`` prefix, the SigV4 signing name and the modeled error shapes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import botocore.session
from botocore.model import OperationModel, ServiceModel, Shape

# Codes the real services answer for a request whose members break the model's constraints. SageMaker and
# Application Auto Scaling say ValidationException; the runtime models ValidationError; CloudWatch (a former
# Query service) says ValidationError [unverified for its JSON protocol].
_VALIDATION_CODE = {"sagemaker-runtime": "ValidationError", "cloudwatch": "ValidationError"}


@functools.cache
def _session() -> Any:
    return botocore.session.get_session()


@functools.cache
def service_model(name: str) -> ServiceModel:
    return _session().get_service_model(name)


@dataclass(frozen=True)
class ErrorInfo:
    """A modeled error: its shape name (the JSON ``__type``), code (query code for query-compatible services),
    HTTP status and the spelling of its message member (``Message`` or ``message``)."""

    shape_name: str
    code: str
    status: int | None
    message_member: str | None
    sender_fault: bool


@dataclass(frozen=True)
class ServiceSpec:
    """What the wire layer needs of one service model."""

    name: str
    model: ServiceModel = field(repr=False, compare=False)

    @property
    def protocol(self) -> str:
        """``json`` or ``rest-json``: the protocol installed botocore sends, not the first one listed."""
        resolved = getattr(self.model, "resolved_protocol", None)
        return str(resolved or self.model.protocol)

    @property
    def json_version(self) -> str:
        return str(self.model.metadata.get("jsonVersion", "1.1"))

    @property
    def content_type(self) -> str:
        if self.protocol == "json":
            return f"application/x-amz-json-{self.json_version}"
        return "application/json"

    @property
    def target_prefix(self) -> str | None:
        prefix = self.model.metadata.get("targetPrefix")
        return str(prefix) if prefix else None

    @property
    def signing_name(self) -> str:
        return str(self.model.signing_name)

    @property
    def query_compatible(self) -> bool:
        return "awsQueryCompatible" in self.model.metadata

    @property
    def validation_code(self) -> str:
        return _VALIDATION_CODE.get(self.name, "ValidationException")

    def operation(self, name: str) -> OperationModel | None:
        if name not in self._operation_names:
            return None
        return self.model.operation_model(name)

    @functools.cached_property
    def _operation_names(self) -> frozenset[str]:
        return frozenset(self.model.operation_names)

    @functools.cached_property
    def _errors(self) -> dict[str, ErrorInfo]:
        found: dict[str, ErrorInfo] = {}
        for shape in self.model.error_shapes:
            info = _error_info(shape)
            found.setdefault(info.shape_name, info)
            found.setdefault(info.code, info)
        return found

    def error_info(self, code: str) -> ErrorInfo | None:
        """The modeled error with this shape name or code, if the model has one."""
        return self._errors.get(code)


def _error_info(shape: Shape) -> ErrorInfo:
    err = shape.metadata.get("error", {})
    members = getattr(shape, "members", {})
    message_member = next((m for m in ("Message", "message") if m in members), None)
    return ErrorInfo(
        shape_name=shape.name,
        code=str(err.get("code", shape.name)),
        status=err.get("httpStatusCode"),
        message_member=message_member,
        sender_fault=bool(err.get("senderFault", False)),
    )


@functools.cache
def service(name: str) -> ServiceSpec:
    """The spec of an installed botocore service (``sagemaker``, ``sagemaker-runtime``, ``cloudwatch`` …)."""
    return ServiceSpec(name, service_model(name))
