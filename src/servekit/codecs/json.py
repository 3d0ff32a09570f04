"""JSON in and out: orjson for speed, the standard library for an error message that gives the position."""

from __future__ import annotations

import json
from typing import Any

import orjson

from servekit.errors import invalid

_DUMP_OPTS = orjson.OPT_SERIALIZE_NUMPY


def loads(body: bytes | str, what: str = "request body") -> Any:
    """Parse JSON fast; on failure say where. NaN/Infinity are accepted as TF Serving does."""
    if not body or (isinstance(body, bytes) and not body.strip()):
        raise invalid(f"the {what} is empty; expected JSON")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(body)
    except json.JSONDecodeError as exc:
        raise invalid(
            f"malformed JSON in the {what} at line {exc.lineno} column {exc.colno} (char {exc.pos}): {exc.msg}"
        ) from None
    except UnicodeDecodeError as exc:
        raise invalid(f"the {what} is not UTF-8 text (byte {exc.start})") from None


def dumps(value: Any) -> bytes:
    return orjson.dumps(value, option=_DUMP_OPTS)
