"""SageMaker's property path syntax and the JsonGet path, parsed and followed (pure).

A property path follows the step's Describe* response: ``ProcessingOutputConfig.Outputs['train'].S3Output.S3Uri``,
``ModelArtifacts.S3ModelArtifacts``, ``TrainingJobSummaries[0].TrainingJobName``,
``FinalMetricDataList['validation:auc'].Value``, ``HyperParameters['eta']``. A name is a member; ``[n]`` is a list
index; ``['key']`` is a map's key, or in a list the element whose name field (``OutputName``, ``ChannelName``,
``MetricName``, ...) is ``key`` — the SDK's ``PropertiesList['name']``.

A JsonGet path is the same syntax over the JSON in a property file (``metrics.auc.value``, ``a.b[0]``,
``$.a['b c']``)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_NAME = re.compile(r"[A-Za-z0-9_\-:@]+")
_INDEX = re.compile(r"\[\s*(-?\d+)\s*\]")
_KEY = re.compile(r"""\[\s*(?:'([^']*)'|"([^"]*)")\s*\]""")


class PathSyntaxError(ValueError):
    """The path is not a property path; the message says where."""


@dataclass(frozen=True, slots=True)
class Member:
    name: str

    def __str__(self) -> str:
        return f".{self.name}"


@dataclass(frozen=True, slots=True)
class Index:
    index: int

    def __str__(self) -> str:
        return f"[{self.index}]"


@dataclass(frozen=True, slots=True)
class Key:
    key: str

    def __str__(self) -> str:
        return f"['{self.key}']"


Segment = Member | Index | Key


def parse_path(path: str, *, json_path: bool = False) -> tuple[Segment, ...]:
    """The segments of ``path``. A JsonGet path may start with ``$`` (``$.a``, ``$['a']``); a property path starts
    with a name."""
    text = path.strip()
    pos = 0
    if json_path and text.startswith("$"):
        pos = 1
        if text[pos : pos + 1] == ".":
            pos += 1
    segments: list[Segment] = []
    expect_name = not (json_path and pos > 0 and text[pos - 1 : pos] == "$")
    if not text[pos:]:
        raise PathSyntaxError(f"path {path!r} is empty")
    while pos < len(text):
        if expect_name:
            m = _NAME.match(text, pos)
            if not m:
                raise PathSyntaxError(f"path {path!r}: expected a name at position {pos}")
            segments.append(Member(m.group(0)))
            pos = m.end()
        expect_name = False
        while pos < len(text) and text[pos] == "[":
            if m := _INDEX.match(text, pos):
                segments.append(Index(int(m.group(1))))
            elif m := _KEY.match(text, pos):
                segments.append(Key(m.group(1) if m.group(1) is not None else m.group(2)))
            else:
                raise PathSyntaxError(f"path {path!r}: expected [<number>] or ['<key>'] at position {pos}")
            pos = m.end()
        if pos < len(text):
            if text[pos] != ".":
                raise PathSyntaxError(f"path {path!r}: unexpected {text[pos]!r} at position {pos}")
            pos += 1
            expect_name = True
            if pos == len(text):
                raise PathSyntaxError(f"path {path!r} ends with '.'")
    return tuple(segments)


def format_path(segments: Sequence[Segment]) -> str:
    return "".join(str(s) for s in segments).lstrip(".")


class PathNotFound(LookupError):
    """Following the path stopped: ``at`` is the part that was found, ``reason`` what was missing."""

    def __init__(self, at: str, reason: str) -> None:
        super().__init__(f"{reason} (after {at!r})" if at else reason)
        self.at = at
        self.reason = reason


def _named_element(items: Sequence[Any], key: str) -> Any:
    """The element of a list of shapes whose name field is ``key``: a member called ``Name`` or ending in
    ``Name`` (OutputName, InputName, ChannelName, MetricName, VariantName...)."""
    for item in items:
        if isinstance(item, Mapping):
            for field_name, value in item.items():
                if (field_name == "Name" or field_name.endswith("Name")) and value == key:
                    return item
    raise KeyError(key)


def follow(value: Any, segments: Sequence[Segment]) -> Any:
    """The value at ``segments`` under ``value``; :class:`PathNotFound` naming the segment that is missing."""
    for i, seg in enumerate(segments):
        at = format_path(segments[:i])
        if isinstance(seg, Member):
            if not isinstance(value, Mapping) or seg.name not in value:
                raise PathNotFound(at, f"no {seg.name!r} there" if isinstance(value, Mapping) else _not_map(value))
            value = value[seg.name]
        elif isinstance(seg, Index):
            if isinstance(value, str) or not isinstance(value, Sequence):
                raise PathNotFound(at, f"{seg} indexes a list, but the value is {_kind(value)}")
            if not -len(value) <= seg.index < len(value):
                raise PathNotFound(at, f"index {seg.index} is out of range for a list of {len(value)}")
            value = value[seg.index]
        elif isinstance(value, Mapping):
            if seg.key not in value:
                raise PathNotFound(at, f"no key {seg.key!r} there")
            value = value[seg.key]
        elif isinstance(value, Sequence) and not isinstance(value, str):
            try:
                value = _named_element(value, seg.key)
            except KeyError:
                raise PathNotFound(at, f"no element named {seg.key!r} in the list") from None
        else:
            raise PathNotFound(at, f"{seg} needs a map or a list, but the value is {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "a list" if isinstance(value, Sequence) else type(value).__name__


def _not_map(value: Any) -> str:
    return f"a member is read from an object, but the value is {_kind(value)}"
