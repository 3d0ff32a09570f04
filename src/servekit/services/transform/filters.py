"""SageMaker's ``DataProcessing``: the JSONPath subset of InputFilter/OutputFilter, and JoinSource.

Supported operators (SageMaker's list): ``$``, ``.name``, ``*`` / ``.*`` / ``[*]``, ``['a','b']``,
``[i]`` and ``[i,j]`` with negative indexes, ``[start:end]`` slices and unions such as ``[0,5:]``. A
selector that yields several children (union, slice, wildcard) must be the last one: SageMaker has no
nested multi-child paths. A multi-name selection gives an object with those keys in the order written
(``$['id','SageMakerOutput']``); index unions and slices give a list. Missing keys and out-of-range
indexes are errors for that record.

JoinSource=Input: a JSON object record gains ``SageMakerOutput``; any other JSON record becomes
``{"SageMakerInput": record, "SageMakerOutput": output}``; a CSV row (a list of its column strings) gets
the output's columns appended.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from servekit.errors import ConfigError

OUTPUT_KEY = "SageMakerOutput"
INPUT_KEY = "SageMakerInput"

_NAME = re.compile(r"\.([^.\[\]*]+)")
_QUOTED = re.compile(r"\s*(?:'([^']*)'|\"([^\"]*)\")\s*")
_INDEX = re.compile(r"^\s*(-?\d+)\s*$")
_SLICE = re.compile(r"^\s*(-?\d+)?\s*:\s*(-?\d+)?\s*$")


class FilterError(ValueError):
    """A record does not fit a filter (missing key, index out of range, wrong type)."""


@dataclass(frozen=True, slots=True)
class Key:
    name: str


@dataclass(frozen=True, slots=True)
class Index:
    i: int


@dataclass(frozen=True, slots=True)
class Keys:
    names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Items:
    """Indexes and slices, e.g. ``[0,5:]``; each part is an int or a (start, end) pair."""

    parts: tuple[int | tuple[int | None, int | None], ...]


@dataclass(frozen=True, slots=True)
class Wildcard:
    pass


Selector = Key | Index | Keys | Items | Wildcard


@dataclass(frozen=True, slots=True)
class JsonPath:
    source: str
    selectors: tuple[Selector, ...]

    @property
    def is_root(self) -> bool:
        return not self.selectors


ROOT = JsonPath("$", ())


def parse_path(expr: str) -> JsonPath:
    text = expr.strip()
    if not text.startswith("$"):
        raise ConfigError(f"JSONPath {expr!r} must start with $")
    if len(text) > 63:
        raise ConfigError(f"JSONPath {expr!r} is longer than SageMaker's 63 characters")
    pos, selectors = 1, list[Selector]()
    while pos < len(text):
        if selectors and not isinstance(selectors[-1], Key | Index):
            raise ConfigError(f"JSONPath {expr!r}: nothing may follow a selector that picks several children")
        if text.startswith(".*", pos):
            selectors.append(Wildcard())
            pos += 2
            continue
        m = _NAME.match(text, pos)
        if m:
            selectors.append(Key(m.group(1)))
            pos = m.end()
            continue
        if text[pos] == "[":
            end = _closing(text, pos, expr)
            selectors.append(_bracket(text[pos + 1 : end], expr))
            pos = end + 1
            continue
        raise ConfigError(f"JSONPath {expr!r}: unexpected {text[pos:]!r} (supported: .name, *, [...], [a:b])")
    return JsonPath(text, tuple(selectors))


def _closing(text: str, start: int, expr: str) -> int:
    quote = ""
    for i in range(start + 1, len(text)):
        c = text[i]
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "]":
            return i
    raise ConfigError(f"JSONPath {expr!r}: unclosed [")


def _bracket(body: str, expr: str) -> Selector:
    if body.strip() == "*":
        return Wildcard()
    if body.strip()[:1] in ("'", '"'):
        names, pos = [], 0
        while pos < len(body):
            m = _QUOTED.match(body, pos)
            if not m:
                raise ConfigError(f"JSONPath {expr!r}: expected quoted names in [{body}]")
            names.append(m.group(1) if m.group(1) is not None else m.group(2))
            pos = m.end()
            if pos < len(body):
                if body[pos] != ",":
                    raise ConfigError(f"JSONPath {expr!r}: expected , between names in [{body}]")
                pos += 1
        return Key(names[0]) if len(names) == 1 else Keys(tuple(names))
    parts: list[int | tuple[int | None, int | None]] = []
    for part in body.split(","):
        m = _INDEX.match(part)
        if m:
            parts.append(int(m.group(1)))
            continue
        s = _SLICE.match(part)
        if not s:
            raise ConfigError(f"JSONPath {expr!r}: {part.strip()!r} is not an index, a start:end slice or a name")
        parts.append((int(s.group(1)) if s.group(1) else None, int(s.group(2)) if s.group(2) else None))
    if len(parts) == 1 and isinstance(parts[0], int):
        return Index(parts[0])
    return Items(tuple(parts))


def apply(path: JsonPath, value: Any) -> Any:
    """The part of ``value`` that ``path`` selects; :class:`FilterError` when the record does not fit it."""
    for sel in path.selectors:
        value = _select(sel, value, path.source)
    return value


def _select(sel: Selector, value: Any, source: str) -> Any:
    if isinstance(sel, Key):
        if not isinstance(value, dict):
            raise FilterError(f"{source}: .{sel.name} needs an object, the record has {_kind(value)}")
        if sel.name not in value:
            raise FilterError(f"{source}: the record has no key {sel.name!r}")
        return value[sel.name]
    if isinstance(sel, Keys):
        if not isinstance(value, dict):
            raise FilterError(f"{source}: a name selection needs an object, the record has {_kind(value)}")
        missing = [n for n in sel.names if n not in value]
        if missing:
            raise FilterError(f"{source}: the record has no key(s) {missing}")
        return {n: value[n] for n in sel.names}
    if isinstance(sel, Wildcard):
        if isinstance(value, dict):
            return list(value.values())
        if isinstance(value, list):
            return value
        raise FilterError(f"{source}: * needs an object or an array, the record has {_kind(value)}")
    if not isinstance(value, list):
        raise FilterError(f"{source}: an index needs an array, the record has {_kind(value)}")
    if isinstance(sel, Index):
        return value[_checked(sel.i, len(value), source)]
    out: list[Any] = []
    for part in sel.parts:
        if isinstance(part, int):
            out.append(value[_checked(part, len(value), source)])
        else:
            out.extend(value[part[0] : part[1]])
    return out


def _checked(i: int, n: int, source: str) -> int:
    if not -n <= i < n:
        raise FilterError(f"{source}: index {i} is out of range for a record of {n} element(s)")
    return i


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return f"a {type(value).__name__} value"


def join_json(record: Any, output: Any) -> Any:
    """JoinSource=Input for a JSON record."""
    if isinstance(record, dict):
        if OUTPUT_KEY in record:
            raise FilterError(f"the input record already has the reserved key {OUTPUT_KEY!r}")
        return {**record, OUTPUT_KEY: output}
    return {INPUT_KEY: record, OUTPUT_KEY: output}


def join_csv(row: list[str], output: Any) -> list[Any]:
    """JoinSource=Input for a CSV row: the output's columns after the input's."""
    return [*row, *(output if isinstance(output, list) else [output])]
