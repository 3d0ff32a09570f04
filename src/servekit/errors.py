"""Protocol-neutral errors.

The core raises :class:`ServekitError` with an :class:`ErrorCode`; every protocol adapter maps the code to
its own status in one table (``servekit.serving.protocols.errors``). Nothing here knows about HTTP.
"""

from __future__ import annotations

import enum
from typing import Any


class ErrorCode(enum.Enum):
    INVALID_ARGUMENT = "invalid_argument"  # malformed body, wrong names/shapes/dtypes
    NOT_FOUND = "not_found"  # unknown model, version, label or signature
    UNAVAILABLE = "unavailable"  # model known but not loaded yet / overloaded
    PAYLOAD_TOO_LARGE = "payload_too_large"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    NOT_ACCEPTABLE = "not_acceptable"
    MODEL_ERROR = "model_error"  # the model itself raised
    DEADLINE_EXCEEDED = "deadline_exceeded"
    CANCELLED = "cancelled"  # the client went away before the work ran
    UNIMPLEMENTED = "unimplemented"
    INTERNAL = "internal"


class ServekitError(Exception):
    """An error with a neutral code and a message written for the person who sent the request."""

    def __init__(self, code: ErrorCode, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details or {}

    def __repr__(self) -> str:
        return f"ServekitError({self.code.name}, {self.message!r})"

    def __reduce__(self) -> tuple[Any, ...]:  # crosses process boundaries whole (decoding in a child process)
        return (ServekitError, (self.code, self.message, self.details))


def invalid(message: str, **details: Any) -> ServekitError:
    return ServekitError(ErrorCode.INVALID_ARGUMENT, message, details)


def not_found(message: str, **details: Any) -> ServekitError:
    return ServekitError(ErrorCode.NOT_FOUND, message, details)


def unavailable(message: str, **details: Any) -> ServekitError:
    """A 503. ``full=True``: a bounded queue (the batch queue, the model threads' wait) is full, which says how many
    requests the server holds at once; the HTTP overload gate reads it so (protocols/app.py)."""
    return ServekitError(ErrorCode.UNAVAILABLE, message, details)


class ConfigError(ValueError):
    """A configuration file or flag is invalid; the message names the file and field."""


class IllegalTransition(RuntimeError):
    """A lifecycle object was asked to move between two states that have no edge."""
