"""AWS API errors: one exception type for every service, and helpers for the codes the hosting APIs use.

An :class:`ApiError` carries the error *code* botocore will show (``e.response["Error"]["Code"]``), the message,
the HTTP status and extra body fields (``ModelError``'s ``OriginalStatusCode`` …). How it is written on the wire
depends on the protocol (``protocol.py``); the domain layer only raises it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class ApiError(Exception):
    """An error answered to an AWS client.

    ``code`` is the code botocore reports (for query-compatible services either the shape name, e.g.
    ``LimitExceededFault``, or its query code ``LimitExceeded``: the renderer writes both). ``status`` ``None``
    takes the model's ``httpStatusCode`` for a modeled error, else 400. ``extra`` holds additional body members,
    e.g. ``{"OriginalStatusCode": 502}``.
    """

    def __init__(
        self, code: str, message: str, status: int | None = 400, extra: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.extra: dict[str, Any] = dict(extra or {})

    def __repr__(self) -> str:
        return f"ApiError({self.code!r}, {self.message!r}, status={self.status}, extra={self.extra!r})"


# ---------------------------------------------------------------------------------------------- control plane
def validation_exception(message: str) -> ApiError:
    """SageMaker's (unmodeled) ``ValidationException``; also what Describe*/Delete* of a missing endpoint,
    config or model answer (``Could not find endpoint "<name>".``), which the boto3 waiters rely on."""
    return ApiError("ValidationException", message, 400)


def resource_not_found(message: str) -> ApiError:
    return ApiError("ResourceNotFound", message, 400)


def resource_in_use(message: str) -> ApiError:
    return ApiError("ResourceInUse", message, 400)


def resource_limit_exceeded(message: str) -> ApiError:
    return ApiError("ResourceLimitExceeded", message, 400)


def conflict(message: str) -> ApiError:
    return ApiError("ConflictException", message, 400)


def internal_failure(message: str = "The request processing has failed because of an unknown error.") -> ApiError:
    """500 for anything the handler did not expect (JSON services and the runtime share the code)."""
    return ApiError("InternalFailure", message, 500)


def access_denied(message: str) -> ApiError:
    return ApiError("AccessDeniedException", message, 400)


# ---------------------------------------------------------------------------------------------- runtime
def validation_error(message: str, error_code: str | None = None) -> ApiError:
    """sagemaker-runtime's ``ValidationError`` (400); ``error_code`` is the body's ``ErrorCode``, e.g.
    ``NO_SUCH_ENDPOINT`` or ``TARGET_MODEL_HEADER_NOT_SUPPORTED``."""
    return ApiError("ValidationError", message, 400, {"ErrorCode": error_code} if error_code else None)


def model_error(
    message: str,
    original_status_code: int,
    original_message: str,
    log_stream_arn: str | None = None,
    error_code: str | None = None,
) -> ApiError:
    """``ModelError`` (424): the container answered non-2xx (or timed out: ``original_status_code`` 0)."""
    extra: dict[str, Any] = {"OriginalStatusCode": original_status_code, "OriginalMessage": original_message}
    if log_stream_arn is not None:
        extra["LogStreamArn"] = log_stream_arn
    if error_code is not None:
        extra["ErrorCode"] = error_code
    return ApiError("ModelError", message, 424, extra)


def service_unavailable(message: str) -> ApiError:
    return ApiError("ServiceUnavailable", message, 503)


def model_not_ready(message: str) -> ApiError:
    """``ModelNotReadyException`` (429): botocore's legacy retry mode retries it."""
    return ApiError("ModelNotReadyException", message, 429)


def internal_dependency(message: str) -> ApiError:
    return ApiError("InternalDependencyException", message, 530)
