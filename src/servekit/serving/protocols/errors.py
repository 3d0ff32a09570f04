"""ErrorCode -> status, one table per protocol: HTTP for the REST fronts (they agree today; each may diverge on
its own) and gRPC status names for the gRPC fronts."""

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

# gRPC status names (grpc.StatusCode members), kept as names so the REST front never imports grpc. Messages are
# the REST ones, unchanged. TF Serving's own mapping where it has one: bad requests are INVALID_ARGUMENT, a model
# still loading UNAVAILABLE; a body over the limit is what grpc itself answers for an oversized message.
GRPC_STATUS = MappingProxyType(
    {
        ErrorCode.INVALID_ARGUMENT: "INVALID_ARGUMENT",
        ErrorCode.NOT_FOUND: "NOT_FOUND",
        ErrorCode.UNAVAILABLE: "UNAVAILABLE",
        ErrorCode.PAYLOAD_TOO_LARGE: "RESOURCE_EXHAUSTED",
        ErrorCode.UNSUPPORTED_MEDIA_TYPE: "INVALID_ARGUMENT",
        ErrorCode.NOT_ACCEPTABLE: "INVALID_ARGUMENT",
        ErrorCode.MODEL_ERROR: "INTERNAL",
        ErrorCode.DEADLINE_EXCEEDED: "DEADLINE_EXCEEDED",
        ErrorCode.CANCELLED: "CANCELLED",
        ErrorCode.UNIMPLEMENTED: "UNIMPLEMENTED",
        ErrorCode.INTERNAL: "INTERNAL",
    }
)
# UNAVAILABLE from a model that is serving means it has no room for the request (a full batch queue, its
# --max_queued_requests in flight): gRPC's RESOURCE_EXHAUSTED, so clients tell "back off" from "not loaded yet".
GRPC_OVERLOADED = "RESOURCE_EXHAUSTED"
