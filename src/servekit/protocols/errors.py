"""ErrorCode -> HTTP status, one table per protocol (they agree today; each may diverge on its own)."""

from __future__ import annotations

from types import MappingProxyType

from servekit.errors import ErrorCode

_COMMON = {
    ErrorCode.INVALID_ARGUMENT: 400,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.PAYLOAD_TOO_LARGE: 413,
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: 415,
    ErrorCode.NOT_ACCEPTABLE: 406,
    ErrorCode.MODEL_ERROR: 500,
    ErrorCode.DEADLINE_EXCEEDED: 504,
    ErrorCode.CANCELLED: 499,  # nginx's "client closed request": nobody reads it, but logs and metrics do
    ErrorCode.UNIMPLEMENTED: 501,
    ErrorCode.INTERNAL: 500,
}

TFSERVING_STATUS = MappingProxyType(dict(_COMMON))
KSERVE_STATUS = MappingProxyType(dict(_COMMON))
SAGEMAKER_STATUS = MappingProxyType(dict(_COMMON))
