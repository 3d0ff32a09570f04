"""Condition steps' tests (SageMaker's ``Conditions``: all must hold), evaluated on resolved values (pure)."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from servekit.services.pipelines.definition.refs import Get, from_json, references, resolve, to_json
from servekit.services.pipelines.errors import PipelineError


class ConditionType(enum.StrEnum):
    EQUALS = "Equals"
    GREATER_THAN = "GreaterThan"
    GREATER_THAN_OR_EQUAL_TO = "GreaterThanOrEqualTo"
    LESS_THAN = "LessThan"
    LESS_THAN_OR_EQUAL_TO = "LessThanOrEqualTo"
    IN = "In"
    NOT = "Not"
    OR = "Or"


_COMPARE: dict[ConditionType, Callable[[Any, Any], bool]] = {
    ConditionType.EQUALS: lambda a, b: bool(a == b),
    ConditionType.GREATER_THAN: lambda a, b: bool(a > b),
    ConditionType.GREATER_THAN_OR_EQUAL_TO: lambda a, b: bool(a >= b),
    ConditionType.LESS_THAN: lambda a, b: bool(a < b),
    ConditionType.LESS_THAN_OR_EQUAL_TO: lambda a, b: bool(a <= b),
}


@dataclass(frozen=True, slots=True)
class Condition:
    """One test. Comparisons use ``left``/``right``; ``In`` tests ``left`` against the list ``right``; ``Not``
    negates ``inner[0]``; ``Or`` holds when any of ``inner`` does."""

    type: ConditionType
    left: Any = None
    right: Any = None
    inner: tuple[Condition, ...] = ()

    def refs(self) -> Iterator[Get]:
        yield from references([self.left, self.right])
        for c in self.inner:
            yield from c.refs()

    def to_json(self) -> dict[str, Any]:
        if self.type is ConditionType.NOT:
            return {"Type": "Not", "Expression": self.inner[0].to_json()}
        if self.type is ConditionType.OR:
            return {"Type": "Or", "Conditions": [c.to_json() for c in self.inner]}
        key = "RightValue" if self.type is not ConditionType.IN else "In"
        return {"Type": str(self.type), "LeftValue": to_json(self.left), key: to_json(self.right)}


def GreaterThanOrEqualTo(left: Any, right: Any) -> Condition:
    return Condition(ConditionType.GREATER_THAN_OR_EQUAL_TO, left, right)


def GreaterThan(left: Any, right: Any) -> Condition:
    return Condition(ConditionType.GREATER_THAN, left, right)


def LessThan(left: Any, right: Any) -> Condition:
    return Condition(ConditionType.LESS_THAN, left, right)


def LessThanOrEqualTo(left: Any, right: Any) -> Condition:
    return Condition(ConditionType.LESS_THAN_OR_EQUAL_TO, left, right)


def Equals(left: Any, right: Any) -> Condition:
    return Condition(ConditionType.EQUALS, left, right)


def In(left: Any, right: Any) -> Condition:
    return Condition(ConditionType.IN, left, right)


def Not(inner: Condition) -> Condition:
    return Condition(ConditionType.NOT, inner=(inner,))


def Or(*inner: Condition) -> Condition:
    return Condition(ConditionType.OR, inner=tuple(inner))


def condition_from_json(doc: Any, where: str) -> Condition:
    if not isinstance(doc, Mapping) or "Type" not in doc:
        raise PipelineError(f"{where}: a condition is a mapping with Type, LeftValue and RightValue; got {doc!r}")
    try:
        kind = ConditionType(doc["Type"])
    except ValueError:
        known = ", ".join(t.value for t in ConditionType)
        raise PipelineError(f"{where}.Type: {doc['Type']!r} is not a condition type; known: {known}") from None
    if kind is ConditionType.NOT:
        return Not(condition_from_json(doc.get("Expression"), f"{where}.Expression"))
    if kind is ConditionType.OR:
        items = doc.get("Conditions")
        if not isinstance(items, list) or not items:
            raise PipelineError(f"{where}.Conditions: Or takes a non-empty list of conditions")
        return Or(*(condition_from_json(c, f"{where}.Conditions[{i}]") for i, c in enumerate(items)))
    right_key = "In" if kind is ConditionType.IN else "RightValue"
    for key in ("LeftValue", right_key):
        if key not in doc:
            raise PipelineError(f"{where}: {kind} needs {key}")
    right = from_json(doc[right_key], f"{where}.{right_key}")
    if kind is ConditionType.IN and not isinstance(right, list):
        raise PipelineError(f"{where}.In: a list of values, got {right!r}")
    return Condition(kind, from_json(doc["LeftValue"], f"{where}.LeftValue"), right)


def evaluate(condition: Condition, lookup: Callable[[Get], Any]) -> bool:
    """Whether ``condition`` holds once its references are looked up; comparing values that do not compare (a
    text with a number) raises :class:`PipelineError` naming both."""
    if condition.type is ConditionType.NOT:
        return not evaluate(condition.inner[0], lookup)
    if condition.type is ConditionType.OR:
        return any(evaluate(c, lookup) for c in condition.inner)
    left = resolve(condition.left, lookup)
    right = resolve(condition.right, lookup)
    if condition.type is ConditionType.IN:
        return left in right
    try:
        return _COMPARE[condition.type](left, right)
    except TypeError:
        raise PipelineError(f"{condition.type} cannot compare {left!r} with {right!r}") from None
