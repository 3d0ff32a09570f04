"""JSON in and out: orjson for speed, the standard library for an error message that gives the position."""

from __future__ import annotations

import json
from typing import Any

import orjson

from servekit._utils.jsondepth import nests_deeper_than
from servekit.errors import invalid

_DUMP_OPTS = orjson.OPT_SERIALIZE_NUMPY
# orjson refuses documents nested deeper than this; the standard library would recurse until RecursionError.
MAX_DEPTH = 1024


def loads(body: bytes | str, what: str = "request body") -> Any:
    """Parse JSON fast; on failure say where. NaN/Infinity are accepted as TF Serving does."""
    if not body or (isinstance(body, bytes) and not body.strip()):
        raise invalid(f"the {what} is empty; expected JSON")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if str(exc).startswith("depth limit exceeded"):
            raise invalid(f"the {what} nests JSON arrays/objects more than {MAX_DEPTH} levels deep") from None
    # the standard library (for NaN/Infinity) recurses per level: the same limit as orjson's, checked first, so the
    # answer does not depend on the recursion limit or on the stack this runs on
    if nests_deeper_than(body, MAX_DEPTH):
        raise invalid(f"the {what} nests JSON arrays/objects more than {MAX_DEPTH} levels deep")
    try:
        return json.loads(body)
    except json.JSONDecodeError as exc:
        raise invalid(
            f"malformed JSON in the {what} at line {exc.lineno} column {exc.colno} (char {exc.pos}): {exc.msg}"
        ) from None
    except UnicodeDecodeError as exc:
        raise invalid(f"the {what} is not UTF-8 text (byte {exc.start})") from None
    except RecursionError:
        raise invalid(f"the {what} nests JSON arrays/objects too deeply to parse") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise invalid(f"the {what} holds a value that cannot be parsed: {exc}") from None


def dumps(value: Any) -> bytes:
    try:
        return orjson.dumps(value, option=_DUMP_OPTS)
    except orjson.JSONEncodeError:
        # Text from a client may hold lone surrogates ("\ud800" is valid JSON, not valid UTF-8), and error
        # messages quote client text: write such characters as visible escapes rather than fail.
        return orjson.dumps(_printable(value), option=_DUMP_OPTS)


def _printable(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_printable(k): _printable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_printable(v) for v in value]
    return value
