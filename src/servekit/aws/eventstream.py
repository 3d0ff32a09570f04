"""AWS event-stream framing (``application/vnd.amazon.eventstream``) for InvokeEndpointWithResponseStream.

A response body is a sequence of messages; each is
``total length | headers length | prelude CRC32 | headers | payload | message CRC32`` (big-endian), headers
being ``name length (1) | name | type 7 (string) | value length (2) | value``. The gateway writes
:func:`payload_part` for each chunk the container streams and, if the stream fails midway,
:func:`stream_error` (``ModelStreamError`` / ``InternalStreamFailure``), which boto3 raises while iterating.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Mapping

CONTENT_TYPE = "application/vnd.amazon.eventstream"
_STRING = 7


def _headers(headers: Mapping[str, str]) -> bytes:
    out = bytearray()
    for name, value in headers.items():
        raw_name, raw_value = name.encode(), value.encode()
        out += struct.pack(">B", len(raw_name)) + raw_name
        out += struct.pack(">BH", _STRING, len(raw_value)) + raw_value
    return bytes(out)


def encode_message(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One event-stream message."""
    head = _headers(headers)
    total = 12 + len(head) + len(payload) + 4
    prelude = struct.pack(">II", total, len(head))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    body = prelude + head + payload
    return body + struct.pack(">I", zlib.crc32(body))


def payload_part(chunk: bytes) -> bytes:
    """A ``PayloadPart`` event carrying ``chunk`` (the model's ``Bytes`` member is the event payload)."""
    return encode_message(
        {":event-type": "PayloadPart", ":content-type": "application/octet-stream", ":message-type": "event"}, chunk
    )


def stream_error(code: str, message: str, error_code: str | None = None) -> bytes:
    """A modeled exception event: ``ModelStreamError`` (with ``ErrorCode``) or ``InternalStreamFailure``."""
    body: dict[str, str] = {"Message": message}
    if error_code is not None:
        body["ErrorCode"] = error_code
    return encode_message(
        {":exception-type": code, ":content-type": "application/json", ":message-type": "exception"},
        json.dumps(body).encode(),
    )
