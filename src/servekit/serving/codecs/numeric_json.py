"""A fast path for the common ``:predict`` body: one tensor of JSON numbers, ``{"instances": [[n, ...], ...]}`` (or
``"inputs"``), read straight into an array by simdjson without a Python float per value.

The general path (orjson, then ``np.asarray`` over the parsed lists) makes and then reads a Python float per value:
``decode_request`` of 32 rows of 64 floats took 119-142 us that way and 42-61 us this way (timeit, best of 7, four
interleaved rounds; one row of 512: 31-35 vs 15-20 us). This path answers only where it gives what the general path
gives — the same shape, dtype and bits — and returns None everywhere else, so that the general path gives every other
answer and every error message as before:

- the body is one object with one key ``"instances"`` or ``"inputs"`` and perhaps ``"signature_name"`` (a string
  without ``[`` or ``.``, or null), no other string, and nothing before it but JSON whitespace (a UTF-8 BOM, a
  repeated key, other keys are left to the general path);
- the value is a non-empty list of non-empty lists, all of one length, holding numbers only (no list deeper, no
  object, no true/false/null);
- integers only, all within int64, give int64 (as ``np.asarray`` does); with any number written as a fraction or with
  an exponent the array is float64, its integers converted to the nearest double as numpy converts Python ints
  (``-0`` is ``0.0``). Integers only with one beyond int64 (numpy makes those uint64 or float64 depending on their
  signs), any integer beyond 64 bits, and numbers beyond float64's range (orjson refuses those too, and the standard
  library reads them as infinity) are left to the general path.

Both parsers round decimal text to the nearest double; ``tests/unit/serving/codecs/test_numeric_json.py`` checks the two
paths against each other with hypothesis, on well-formed and malformed bodies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

try:
    import simdjson
except ImportError:  # a dependency only where it has wheels (not on Python 3.14 yet): the general path reads every body
    HAVE_SIMDJSON = False
else:
    HAVE_SIMDJSON = True

# The one key and whether it is the row format (decode_predict: "instances" rows, "inputs" columns).
_KEYS = {"instances": True, "inputs": False}
_SIGNATURE = "signature_name"
# What may open a body this path reads: JSON whitespace or the object itself.
_FIRST = frozenset(b"{ \t\n\r")
# Below ~500 bytes (one row of ~60 numbers) the general path is as fast (timeit, 1 row of 32: 3.8-4.9 us general,
# 4.7-8.2 fast; of 64: 5.1-7.1 vs 4.3-4.7): smaller bodies, the 4-number tiny one included, cost a comparison.
MIN_BYTES = 512
_OPEN = ord("[")
_NUMPY_COUNT_BYTES = 2048


def numeric_tensor(raw: bytes) -> tuple[str | None, npt.NDArray[Any], bool] | None:
    """The body's ``signature_name``, its one tensor and whether it came as rows, or None where the general path
    must answer. Callers skip bodies under ``MIN_BYTES`` themselves (one comparison, no call)."""
    if not HAVE_SIMDJSON:
        return None
    # Cheap refusals first (memchr, well under a microsecond for 17 KB): named inputs or strings among the values
    # make a seventh quote (the two keys and signature_name's value have six); correctness does not rest on this,
    # only the time spent on bodies the general path will read anyway.
    if not raw or raw[0] not in _FIRST:
        return None
    pos = -1
    for _ in range(6):
        pos = raw.find(b'"', pos + 1)
        if pos < 0:
            break
    else:
        if raw.find(b'"', pos + 1) >= 0:
            return None
    # A parser per call: it costs ~0.1 us to make, and one shared by threads (or kept alive by a value still
    # referencing its document) could not parse again.
    parser = simdjson.Parser()
    try:
        doc = parser.parse(raw)
    except (ValueError, RuntimeError):  # not JSON, or a number beyond 64 bits: the general path answers
        return None
    if not isinstance(doc, simdjson.Object):
        return None
    keys = list(doc)  # items() would unbox the tensor into Python lists
    sig_name: str | None = None
    if len(keys) == 2 and _SIGNATURE in keys and keys[0] != keys[1]:  # a repeated key: the general path takes the last
        keys.remove(_SIGNATURE)
        given = doc[_SIGNATURE]
        # A "[" or "." in it would upset the counts below (None: JSON null, which the general path takes as absent).
        if given is not None and not (isinstance(given, str) and "[" not in given and "." not in given):
            return None
        sig_name = given
    if len(keys) != 1 or keys[0] not in _KEYS:
        return None
    value = doc[keys[0]]
    if not isinstance(value, simdjson.Array):
        return None
    arr = _rectangle(value, raw)
    return None if arr is None else (sig_name, arr, _KEYS[keys[0]])


def numeric_rows(raw: bytes) -> npt.NDArray[Any] | None:
    """A bare JSON list of rows of numbers (``[[0.5, 1], [2e3, 4]]``) as ``decode_instances`` reads the list, through
    :func:`numeric_tensor` on ``{"instances": <raw>}``, or None where the general reading must answer. Only a body
    without a quote is wrapped: with none no key can be written, so the wrapped text is valid JSON only when the
    body itself is one value."""
    if b'"' in raw or raw.lstrip(b" \t\n\r")[:1] != b"[":
        return None
    got = numeric_tensor(b'{"instances":' + raw + b"}")
    return None if got is None else got[1]


def numeric_lines(lines: Sequence[bytes]) -> npt.NDArray[Any] | None:
    """JSON Lines records that are each one flat list of numbers (``[0.5, 1, 2e3]``, the common batch transform
    input), as the array reading every line with orjson and stacking the lists gives, or None where that reading
    must answer (and give its own error). One simdjson parse of the rows the lines make (:func:`numeric_rows`):
    1,024 lines of 64 floats in ~2.6 ms against ~3.3 ms line by line (timeit).

    Why the joined text says nothing another reading would not: no line holds a quote, each starts with ``[`` and
    ends with ``]``, and :func:`numeric_tensor` answers only for a rectangle of numbers with one ``[`` per row plus
    the outer one. As many rows as lines then means one ``[`` per line, hence one ``]`` too (no strings: the
    brackets balance): each line is ``[numbers]`` on its own, parsed alone exactly as it is here. A line split
    across two (``[1,2],[3`` then ``4]``), a blank or CRLF-ended line, NaN, nesting, anything else is read line by
    line."""
    if not HAVE_SIMDJSON or not lines:  # without the parser, the checks and the join would be spent for nothing
        return None
    for line in lines:
        if line[:1] != b"[" or line[-1:] != b"]":
            return None
    rows = numeric_rows(b"[" + b",".join(lines) + b"]")
    return rows if rows is not None and len(rows) == len(lines) else None


def _rectangle(value: simdjson.Array, raw: bytes) -> npt.NDArray[Any] | None:
    n = len(value)
    if not n:
        return None
    width = -1
    for row in value:
        if not isinstance(row, simdjson.Array):
            return None
        if width != len(row):
            if width != -1:
                return None
            width = len(row)
    # as_buffer flattens lists nested in a row ([[1, 2], [[3], 4]] would pass the lengths above). No string in the
    # body holds a "[" (the keys are known; signature_name was checked), so every "[" in it opens a list of the
    # value: n + 1 of them means none is nested below the rows.
    if width < 1 or _count_open(raw) != n + 1:
        return None
    # A "." can only be in a number here (no string in the body holds one, and a string among the values makes
    # as_buffer refuse): then the array is float64, and asking for int64 first would cost a raised exception (~5 us).
    if b"." not in raw:
        try:
            return _array(value.as_buffer(of_type="i"), np.int64, n, width)
        except TypeError:  # a number that is not an integer (1e5), or true/false/null, which "d" refuses too
            pass
        except ValueError:  # an integer beyond int64: numpy's promotion of those depends on their neighbours
            return None
    try:
        return _array(value.as_buffer(of_type="d"), np.float64, n, width)
    except (TypeError, ValueError):  # true/false/null, or a string
        return None


def _count_open(raw: bytes) -> int:
    # bytes.count looks at one byte at a time (~10 us for 17 KB); numpy compares 17 KB in ~3 us but costs ~1.5 us
    # to set up, which is bytes.count's time for ~2.5 KB.
    if len(raw) < _NUMPY_COUNT_BYTES:
        return raw.count(b"[")
    return int(np.count_nonzero(np.frombuffer(raw, np.uint8) == _OPEN))


def _array(data: Any, dtype: type[np.generic], n: int, width: int) -> npt.NDArray[Any]:
    # bytearray: a writable array owning its memory, as np.asarray's is (frombuffer over bytes is read-only).
    return np.frombuffer(bytearray(data), dtype).reshape(n, width)
