"""The numeric fast path (simdjson straight into numpy) gives exactly what the general path (orjson, ``np.asarray``)
gives — shape, dtype, every bit, the row flag — or nothing, in which case ``decode_request`` answers (or refuses,
with the same message) as the general path does. Bodies: random rectangles of JSON numbers written in many ways
(integers at int64/uint64's edges and beyond, shortest and long decimal forms, exponents, denormals, ``-0``,
numbers beyond float64's range, random whitespace), and the same bodies damaged."""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from servekit.errors import ServekitError, invalid
from servekit.serving.codecs.json import loads
from servekit.serving.codecs.numeric_json import HAVE_SIMDJSON, MIN_BYTES, numeric_lines, numeric_tensor
from servekit.serving.codecs.sagemaker import JSON, decode_body, numeric_body
from servekit.serving.codecs.tfjson import decode_instances, decode_predict, decode_request
from servekit.serving.schema import ONLY_INPUT
from servekit.types import PREDICT_METHOD

pytestmark = pytest.mark.skipif(not HAVE_SIMDJSON, reason="pysimdjson has no wheel for this Python: no fast path")


def general(raw: bytes) -> tuple[str | None, dict[str, npt.NDArray[Any]], bool]:
    """decode_request for :predict as it was before the fast path."""
    body = loads(raw)
    sig_name = body.get("signature_name") if isinstance(body, dict) else None
    if sig_name is not None and not isinstance(sig_name, str):
        raise invalid('"signature_name" must be a string')
    inputs, rows = decode_predict(body, ())
    return sig_name, inputs, rows


def outcome(fn: Any, raw: bytes) -> Any:
    try:
        sig, inputs, rows = fn(raw)
    except ServekitError as exc:
        return ("error", exc.code, exc.message, exc.details)
    return ("ok", sig, rows, {k: tensor(v) for k, v in inputs.items()})


def tensor(arr: npt.NDArray[Any]) -> tuple[Any, ...]:
    # An object array's bytes are pointers: compare its values and their types instead.
    data = [(type(v), repr(v)) for v in arr.ravel().tolist()] if arr.dtype.kind == "O" else arr.tobytes()
    return (arr.dtype.str, arr.shape, data, arr.flags.writeable)


def assert_same(raw: bytes) -> tuple[str | None, npt.NDArray[Any], bool] | None:
    """The fast path's answer equals the general one wherever it gives one, and decode_request (which takes the
    fast path for large bodies) answers exactly as the general path does for every body."""
    want = outcome(general, raw)
    fast = numeric_tensor(raw)
    if fast is not None:
        sig, arr, rows = fast
        assert want == outcome(lambda _: (sig, {ONLY_INPUT: arr}, rows), raw)
    assert outcome(lambda r: decode_request(r, PREDICT_METHOD), raw) == want
    return fast


# -- numbers as JSON text ---------------------------------------------------------------------------------------

INT_EDGES = [0, 1, -1, 2**53, 2**53 + 1, 2**63 - 1, -(2**63), 2**63, 2**64 - 1, 2**64, -(2**63) - 1, 10**30]
HARD_FLOATS = [
    "-0", "-0.0", "0.0", "-0e0", "0E-5", "1e-400", "-1e-400", "1e308", "1.7976931348623157e308",
    "1.7976931348623158e308", "1.7976931348623159e308", "1e309", "-1e400", "4.9e-324", "2.4703282292062327e-324",
    "2.4703282292062328e-324", "2.2250738585072011e-308", "2.2250738585072012e-308", "9007199254740993",
    "9007199254740993.0", "1.00000000000000011102230246251565404236316680908203125",
    "1.00000000000000011102230246251565404236316680908203124", "7.038531e-26", "1e0000000000000000000001",
    "123456789012345678901234567890", "0.1", "1E+2", "1e-07", "3.0e+10",
]  # fmt: skip


def float_text(draw: st.DrawFn) -> str:
    x = draw(st.floats(allow_nan=False, allow_infinity=False, allow_subnormal=True))
    form = draw(st.sampled_from(["repr", "e", "E", "g17", "short", "exp0"]))
    if form == "repr":
        text = repr(x)
    elif form == "e":
        text = f"{x:.{draw(st.integers(0, 25))}e}"
    elif form == "E":
        text = f"{x:.{draw(st.integers(0, 25))}E}"
    elif form == "g17":
        text = f"{x:.17g}"
    elif form == "short":
        text = f"{x:.{draw(st.integers(0, 6))}f}"
    else:
        mant, _, exp = f"{x:.20e}".partition("e")
        text = f"{mant}e{int(exp):+05d}"  # exponent with leading zeros: valid JSON
    return text.replace("inf", "1e999")  # "%f" of a huge value is still finite digits; belt and braces


def digit_text(draw: st.DrawFn) -> str:
    """A JSON number built digit by digit: long mantissas, leading-zero fractions, signed exponents."""
    sign = draw(st.sampled_from(["", "-"]))
    head = draw(st.sampled_from(["0", *"123456789"]))
    if head != "0":
        head += draw(st.text("0123456789", max_size=30))
    frac = draw(st.one_of(st.just(""), st.text("0123456789", min_size=1, max_size=40).map(lambda d: "." + d)))
    exp = draw(
        st.one_of(
            st.just(""),
            st.tuples(st.sampled_from("eE"), st.sampled_from(["", "+", "-"]), st.integers(0, 400)).map(
                lambda t: f"{t[0]}{t[1]}{t[2]}"
            ),
        )
    )
    return sign + head + frac + exp


@st.composite
def number(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["small", "int", "edge", "float", "digits", "hard", "bits"]))
    if kind == "small":
        return str(draw(st.integers(-1000, 1000)))
    if kind == "int":
        return str(draw(st.integers(-(2**70), 2**70)))
    if kind == "edge":
        return str(draw(st.sampled_from(INT_EDGES)) + draw(st.integers(-2, 2)))
    if kind == "float":
        return float_text(draw)
    if kind == "digits":
        return digit_text(draw)
    if kind == "hard":
        return str(draw(st.sampled_from(HARD_FLOATS)))
    (x,) = struct.unpack("<d", draw(st.binary(min_size=8, max_size=8)))  # any double, denormals included
    return repr(x) if math.isfinite(x) else "1e400"


WS = st.text(" \t\n\r", max_size=3)
# Characters some parser might take for whitespace, and JSON does not.
NOT_WS = st.sampled_from(["\f", "\v", "\x00", "\xa0", "\u2028"])


@st.composite
def body(draw: st.DrawFn) -> str:
    rows = draw(st.integers(1, 6))
    width = draw(st.integers(1, 6))
    uniform = draw(st.sampled_from(["mixed", "ints", "floats"]))
    if uniform == "ints":
        cell: st.SearchStrategy[str] = st.integers(-(2**63), 2**63 - 1).map(str)
    elif uniform == "floats":
        cell = st.floats(allow_nan=False, allow_infinity=False).map(repr)
    else:
        cell = number()
    grid = [[draw(cell) for _ in range(width)] for _ in range(rows)]
    ws = draw(st.booleans())

    def sep(text: str) -> str:
        return (draw(WS) + text + draw(WS)) if ws else text

    text = sep("[") + sep(",").join(sep("[") + sep(",").join(row) + sep("]") for row in grid) + sep("]")
    key = draw(st.sampled_from(["instances", "inputs"]))
    members = [f'"{key}"' + sep(":") + text]
    if draw(st.booleans()):  # signature_name: any text (escaped or not), null, or something the general path refuses
        given = draw(st.one_of(st.text(), st.sampled_from(["serving_default", "a.b", "[x]", "x\\[", '"q"'])))
        value = draw(st.sampled_from([json.dumps(given), json.dumps(given, ensure_ascii=False), "null", "3", "[]"]))
        members.insert(draw(st.integers(0, 1)), '"signature_name"' + sep(":") + value)
    return sep("{") + sep(",").join(members) + sep("}")


# Tokens from wider grammars (JavaScript, C's strtod, Python's float) and other JSON values.
NOT_NUMBERS = [
    "NaN", "Infinity", "-Infinity", "true", "false", "null", '"1"', "{}", "[]", "[1]", "01", "+1", ".5", "1.", "0x10",
    "1e", "1e+", "--1", "1.5.2", "1e5e5", "nan", "inf", "-", '{"a": 1}', "[[1]]", "1 2",
]  # fmt: skip


def damage(draw: st.DrawFn, text: str) -> str:
    """One edit that keeps the body close to the fast path's shape: most make it invalid JSON or a tensor that
    is not a rectangle of numbers, some leave it valid (the answer must still match)."""
    how = draw(st.integers(0, 9))
    if how == 0:  # replace one number-ish run with a token from a wider grammar
        token = draw(st.sampled_from(NOT_NUMBERS))
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 4)))
        return text[:i] + token + text[j:]
    if how == 1:  # delete a character
        i = draw(st.integers(0, max(len(text) - 1, 0)))
        return text[:i] + text[i + 1 :]
    if how == 2:  # insert a structural or odd character
        i = draw(st.integers(0, len(text)))
        return text[:i] + draw(st.sampled_from([",", "[", "]", "{", "}", ":", '"', "\\", "e", "-", "."])) + text[i:]
    if how == 3:  # not-quite-whitespace somewhere
        i = draw(st.integers(0, len(text)))
        return text[:i] + draw(NOT_WS) + text[i:]
    if how == 4:  # a ragged row
        return text.replace("]", ",1]", 1)
    if how == 5:  # another key
        extra = draw(
            st.sampled_from(
                ['"signature_name": "s"', '"signature_name": 3', '"instances": [[1]]', '"x": 1', '"inputs": [[1]]']
            )
        )
        return text[: text.rindex("}")] + ", " + extra + "}"
    if how == 6:  # bytes before or after the object
        return draw(st.sampled_from(["\ufeff", "x", "[]"])) + text if draw(st.booleans()) else text + "x"
    if how == 7:  # nesting: wrap a number in a list, or the rows in one more
        return text.replace("[", "[[", 2).replace("]", "]]", 2) if draw(st.booleans()) else "[" + text + "]"
    if how == 8:  # an empty row or no rows
        return text.replace("[", "[[],", 1) if draw(st.booleans()) else '{"instances": []}'
    return text.replace('"instances"', draw(st.sampled_from(['"\\u0069nstances"', '"instance"', '"inputs"'])))


@st.composite
def damaged_body(draw: st.DrawFn) -> str:
    return damage(draw, draw(body()))


@settings(max_examples=600, deadline=None)
@given(body())
@example('{"instances": [[1.5, -0], [2, 3]]}')
@example('{"instances": [[-0, -0.0]]}')
@example('{"instances": [[9223372036854775808, 1.5]]}')
@example('{"instances": [[1.5, 9223372036854775808]]}')
@example('{"instances": [[9223372036854775808, -1]]}')
@example('{"instances": [[18446744073709551616, 2.5]]}')
@example('{"instances": [[1e400, 1]]}')
@example('{"inputs": [[1, 2], [3, 4]]}')
@example('{"instances": [[1E5]]}')
def test_rectangles_of_numbers_decode_as_the_general_path_does(text: str) -> None:
    assert_same(text.encode("utf-8", "surrogatepass"))  # a lone surrogate from st.text() as CESU bytes


@settings(max_examples=600, deadline=None)
@given(damaged_body())
@example('{"instances": [[{}]]}')
@example('{"instances": [[[]]]}')
@example('{"instances": [[1, 2], [[3], 4]]}')
@example('{"instances": [[1, 2], [[3, 4], []]]}')
@example('{"instances": [[true, 1.5]]}')
@example('{"instances": [[null]]}')
@example('\ufeff{"instances": [[1.5]]}')
@example('{"instances": [[1.5]], "instances": [[2.5]]}')
@example('{"\\u0069nstances": [[1.5]]}')
@example('{"instances": [[1.5]]}\f')
@example('{"instances": [[1.5,]]}')
@example('{"instances": [[NaN, 1.5]]}')
def test_damaged_bodies_answer_or_fail_as_the_general_path_does(text: str) -> None:
    assert_same(text.encode("utf-8", "surrogatepass"))  # a lone surrogate from st.text() as CESU bytes


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_answer_or_fail_as_the_general_path_does(raw: bytes) -> None:
    assert_same(b'{"instances": [[' + raw + b"]]}")
    assert_same(raw)


def test_the_common_bodies_take_the_fast_path() -> None:
    rng = np.random.default_rng(0)
    floats = json.dumps({"instances": [[round(float(v), 4) for v in row] for row in rng.standard_normal((32, 64))]})
    sig, arr, rows = assert_same(floats.encode()) or pytest.fail("32x64 floats fell back")
    assert (sig, arr.dtype, arr.shape, rows) == (None, np.float64, (32, 64), True)
    ints = json.dumps({"inputs": rng.integers(-1000, 1000, (3, 200)).tolist()}, separators=(",", ":"))
    sig, arr, rows = assert_same(ints.encode()) or pytest.fail("3x200 ints fell back")
    assert (sig, arr.dtype, arr.shape, rows) == (None, np.int64, (3, 200), False)
    named = floats[:-1] + ', "signature_name": "serving_default"}'
    sig, arr, rows = assert_same(named.encode()) or pytest.fail("32x64 floats with signature_name fell back")
    assert (sig, arr.dtype, arr.shape, rows) == ("serving_default", np.float64, (32, 64), True)
    assert arr.flags.writeable  # as np.asarray's arrays are
    assert numeric_tensor(floats.encode()) is not None and len(floats) >= MIN_BYTES


def test_small_bodies_and_other_shapes_are_left_to_the_general_path() -> None:
    # decode_request does not try the fast path below MIN_BYTES (the general path is as fast there); the answer is
    # the same either way.
    assert_same(b'{"instances": [[1.0, 2.0, 3.0, 4.0]]}')
    pad = b" " * MIN_BYTES
    for raw in [
        b'{"instances": [1.0, 2.0]}',  # one dimension
        b'{"instances": [[[1.0], [2.0]]]}',  # three
        b'{"instances": [[1.0, 2.0]], "signature_name": "serving.default"}',  # a ".": left to the general path
        b'{"instances": [[1.0, 2.0]], "signature_name": "serving_default", "signature_name": "x"}',
        b'{"instances": [{"x": [1.0]}]}',  # named inputs
        b'{"instances": [[9223372036854775808]]}',  # uint64 in the general path
    ]:
        assert numeric_tensor(raw + pad) is None, raw
        assert_same(raw + pad)


# -- JSON Lines of rows (batch transform input) -----------------------------------------------------------------


def line_by_line(lines: list[bytes]) -> Any:
    """The transform's reading of JSON Lines without the fast path: orjson per line, the values stacked."""
    try:
        values = [orjson.loads(line) for line in lines]
        return ("ok", {k: tensor(v) for k, v in decode_instances(values, ()).items()})
    except (orjson.JSONDecodeError, ServekitError):
        return ("refused",)


def assert_same_lines(lines: list[bytes]) -> npt.NDArray[Any] | None:
    fast = numeric_lines(lines)
    if fast is not None:
        assert line_by_line(lines) == ("ok", {ONLY_INPUT: tensor(fast)})
    return fast


@st.composite
def row_lines(draw: st.DrawFn) -> list[str]:
    rows, width = draw(st.integers(1, 8)), draw(st.integers(1, 5))
    ws = draw(st.booleans())

    def sep(text: str) -> str:
        return (draw(st.text(" \t", max_size=2)) + text + draw(st.text(" \t", max_size=2))) if ws else text

    lines = ["[" + sep(",").join(draw(number()) for _ in range(width)) + "]" for _ in range(rows)]
    for _ in range(draw(st.integers(0, 2))):  # damage, or moves that keep it valid
        i = draw(st.integers(0, len(lines) - 1))
        how = draw(st.integers(0, 7))
        line = lines[i]
        cut = draw(st.integers(0, len(line)))
        if how == 0 and len(lines) > 1:  # two lines run together, as the joined text would read them
            lines[i : i + 2] = [line + draw(st.sampled_from([",", "", " "])) + lines[(i + 1) % len(lines)]]
        elif how == 1:  # a line split in two
            lines[i : i + 1] = [line[:cut], line[cut:]]
        elif how == 2:
            lines[i] = line[:cut] + draw(st.sampled_from([",", "[", "]", '"', "{", "}", ":", "\r", "\\"])) + line[cut:]
        elif how == 3:
            lines[i] = line[:cut] + draw(st.sampled_from(NOT_NUMBERS)) + line[cut:]
        elif how == 4:
            lines[i] = draw(st.sampled_from(["", " ", "[]", "[[1]]", '["1"]', "[1]\r", " [1]", "{}", "1"]))
        elif how == 5:  # a ragged row
            lines[i] = line.replace("]", ",1]", 1)
        elif how == 6:  # a line that is two rows
            lines[i] = line + "," + line
        else:
            lines[i] = "[" + line + "]"
    return lines


@settings(max_examples=600, deadline=None)
@given(row_lines())
@example(["[1,2],[3", "4]"])  # valid once joined, refused line by line
@example(["[1,2]", "[3,4]"])
@example(["[1.5,2]", "[3,4]"])
@example(["[1]]", "[[2]"])
@example(["[9223372036854775808]", "[1.5]"])
@example(["[1e400]"])
@example(['[1]],"signature_name":null,"x":[[2'])
@example(["[1]", ""])
def test_json_lines_of_rows_read_as_one_give_what_line_by_line_gives(lines: list[str]) -> None:
    assert_same_lines([line.encode("utf-8", "surrogatepass") for line in lines])


def test_the_usual_transform_lines_take_the_fast_path() -> None:
    rows = np.round(np.random.default_rng(0).normal(size=(1024, 64)), 4)
    arr = assert_same_lines([orjson.dumps(r) for r in rows.tolist()])
    assert arr is not None and arr.dtype == np.float64 and np.array_equal(arr, rows)
    ints = assert_same_lines([b"[1,2,3]", b"[4, 5, 6]"])
    assert ints is not None and ints.dtype == np.int64 and ints.tolist() == [[1, 2, 3], [4, 5, 6]]
    assert numeric_lines([b"[1,2],[3", b"4]"]) is None
    assert numeric_lines([b'{"x": [1, 2]}']) is None
    assert numeric_lines([]) is None


# -- SageMaker JSON bodies (/invocations) -----------------------------------------------------------------------


def sagemaker_general(raw: bytes) -> tuple[str | None, dict[str, npt.NDArray[Any]], bool]:
    """decode_body's JSON reading as it was before the fast path."""
    doc = loads(raw)
    if isinstance(doc, dict) and ("instances" in doc or "inputs" in doc):
        sig_name = doc.get("signature_name")
        inputs, as_rows = decode_predict(doc, ())
        return sig_name if isinstance(sig_name, str) else None, inputs, as_rows
    if isinstance(doc, dict):
        raise invalid('a JSON object body must hold "instances" or "inputs"; send a bare list for rows')
    return None, decode_instances(doc if isinstance(doc, list) else [doc], ()), True


def assert_same_sagemaker(raw: bytes) -> bool:
    """decode_body answers every JSON body as before; True when the fast path gave the answer."""
    want = outcome(sagemaker_general, raw)

    def now(r: bytes) -> tuple[str | None, dict[str, npt.NDArray[Any]], bool]:
        inputs, as_rows, sig = decode_body(r, JSON)
        return sig, inputs, as_rows

    assert outcome(now, raw) == want
    fast = numeric_body(raw)
    if fast is not None:
        assert want == outcome(lambda _: (fast[0], {ONLY_INPUT: fast[1]}, fast[2]), raw)
    return fast is not None


@st.composite
def sagemaker_body(draw: st.DrawFn) -> str:
    text = draw(st.one_of(body(), damaged_body()))
    if draw(st.booleans()):  # a bare list of rows: the value alone, as SageMaker clients send it
        start, end = text.find("["), text.rfind("]")
        if 0 <= start < end:
            text = text[start : end + 1]
            if draw(st.booleans()):
                text = damage(draw, '{"instances": ' + text + "}")[len('{"instances": ') : -1]
    return text


@settings(max_examples=600, deadline=None)
@given(sagemaker_body())
@example("[[1.5, 2], [3, 4]]")
@example(" [[1.5, 2]] ")
@example("[[1.5, 2]]]")
@example("[[1.5, 2]]}, {")
@example('[[1.5]], "signature_name": "x"')
@example("[[1.5, 2]], [[3, 4]]")
@example("[1.5, 2]")
@example("[]")
@example('{"instances": [[1.5]], "signature_name": 3}')
def test_sagemaker_json_bodies_decode_as_before(text: str) -> None:
    assert_same_sagemaker(text.encode("utf-8", "surrogatepass"))


def test_the_usual_sagemaker_bodies_take_the_fast_path() -> None:
    rows = np.round(np.random.default_rng(0).normal(size=(32, 64)), 4).tolist()
    assert assert_same_sagemaker(json.dumps(rows).encode())
    assert assert_same_sagemaker(json.dumps({"instances": rows}).encode())
    assert not assert_same_sagemaker(json.dumps([{"x": r} for r in rows]).encode())
