"""The ``pattern`` constraints of botocore's models are Java regular expressions; this compiles them for Python.

Java features the models use and Python's ``re`` lacks are translated: POSIX classes (``\\p{Alnum}``,
``\\p{Print}``, ``\\p{ASCII}`` …, ASCII-only as in Java), Unicode categories (``\\p{L}``, ``\\p{N}`` …, as
explicit ranges built from :mod:`unicodedata`), ``\\z`` and surrogate-pair ranges. Java's ``matches()`` is a whole-
string match, so callers use :meth:`re.Pattern.fullmatch`. A pattern that still does not compile yields ``None``
(the constraint is skipped, never an error at request time).
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata

_POSIX = {
    "Lower": "a-z",
    "Upper": "A-Z",
    "ASCII": "\\x00-\\x7f",
    "Alpha": "a-zA-Z",
    "Digit": "0-9",
    "Alnum": "a-zA-Z0-9",
    "Punct": "!-/:-@\\[-`{-~",
    "Graph": "!-~",
    "Print": " -~",
    "Blank": " \\t",
    "Cntrl": "\\x00-\\x1f\\x7f",
    "XDigit": "0-9a-fA-F",
    "Space": " \\t\\n\\x0b\\f\\r",
}
_PROP = re.compile(r"\\([pP])\{(\w+)\}")
# Java writes supplementary code points as UTF-16 surrogate ranges, e.g. [\uD800\uDC00-\uDBFF\uDFFF]
_QUANTIFIED_END = re.compile(r"(?<!\\)\$\{[1-9]\d*(?:,\d*)?\}")
_SURROGATES = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}-\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


@functools.cache
def _all_categories() -> dict[str, str]:
    """Every Unicode general category (``Lu``) and major class (``L``) as a character-class body, in one pass."""
    spans: dict[str, list[list[int]]] = {}
    for cp in range(sys.maxunicode + 1):
        cat = unicodedata.category(chr(cp))
        for key in (cat, cat[0]):
            runs = spans.setdefault(key, [])
            if runs and runs[-1][1] == cp - 1:
                runs[-1][1] = cp
            else:
                runs.append([cp, cp])
    return {key: "".join(_range(lo, hi) for lo, hi in runs) for key, runs in spans.items()}


def _category_ranges(category: str) -> str:
    return _all_categories().get(category, "")


def _range(lo: int, hi: int) -> str:
    return f"\\U{lo:08x}" if lo == hi else f"\\U{lo:08x}-\\U{hi:08x}"


def _class_body(name: str) -> str | None:
    if name in _POSIX:
        return _POSIX[name]
    if name.startswith("Is") and len(name) > 2:
        name = name[2:]
    if 1 <= len(name) <= 2 and name[0].isupper():
        body = _category_ranges(name)
        return body or None
    return None


def translate(pattern: str) -> str:
    """The Python spelling of a Java pattern (raises ``ValueError`` for a ``\\p{…}`` it does not know)."""

    def surrogate_pair(m: re.Match[str]) -> str:
        text = m.group(0)
        hi1, lo1, hi2, lo2 = (int(x, 16) for x in re.findall(r"\\u([0-9a-fA-F]{4})", text))
        first = 0x10000 + ((hi1 - 0xD800) << 10) + (lo1 - 0xDC00)
        last = 0x10000 + ((hi2 - 0xD800) << 10) + (lo2 - 0xDC00)
        return _range(first, last)

    out = _SURROGATES.sub(surrogate_pair, pattern)
    out = _QUANTIFIED_END.sub("$", out)  # Java accepts a quantified anchor (``${1,256}``); it means ``$``
    result: list[str] = []
    pos = 0
    depth = 0  # inside a character class?
    i = 0
    while i < len(out):
        ch = out[i]
        if ch == "\\" and i + 1 < len(out):
            m = _PROP.match(out, i)
            if m:
                body = _class_body(m.group(2))
                if body is None:
                    raise ValueError(f"unsupported property class {m.group(0)}")
                negate = m.group(1) == "P"
                if depth:
                    if negate:
                        raise ValueError("negated property inside a character class")
                    piece = body
                else:
                    piece = f"[{'^' if negate else ''}{body}]"
                result.append(out[pos:i] + piece)
                i = pos = m.end()
                continue
            if out[i + 1] == "z":
                result.append(out[pos:i] + "\\Z")
                i = pos = i + 2
                continue
            i += 2
            continue
        if ch == "[" and not depth:
            depth = 1
        elif ch == "]" and depth:
            depth = 0
        i += 1
    result.append(out[pos:])
    return "".join(result)


@functools.cache
def compile_pattern(pattern: str) -> re.Pattern[str] | None:
    """The compiled pattern, or ``None`` when it cannot be expressed with Python's ``re``."""
    try:
        return re.compile(translate(pattern))
    except (re.error, ValueError):
        return None
