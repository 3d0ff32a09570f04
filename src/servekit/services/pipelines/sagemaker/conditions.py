"""A ConditionStep's outcome (pure over an :class:`Evaluator`): all of its ``Conditions`` hold.

Comparisons follow SageMaker's: numbers compare as numbers (an integer parameter equals the float a JsonGet read
when their values are equal); a string that spells a number compares as that number against a number (property
values and JSON files often carry numbers as text); two strings compare as text (so ISO dates order by time);
booleans are equal only to booleans (or to the text ``true``/``false``) and are not ordered. Anything else (null, a
list, an object, a boolean in an ordering) cannot be compared: :class:`EvaluationError`, and the condition step
fails. ``In`` holds when the query equals one of the values; ``Not`` negates; ``Or`` holds when one of its
conditions does."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

from servekit.services.pipelines.sagemaker.errors import EvaluationError
from servekit.services.pipelines.sagemaker.evaluate import Evaluator, to_text
from servekit.services.pipelines.sagemaker.model import Comparison, Condition, InValues, NotCondition, Step

_ORDER: dict[str, Callable[[Any, Any], bool]] = {
    "GreaterThan": operator.gt,
    "GreaterThanOrEqualTo": operator.ge,
    "LessThan": operator.lt,
    "LessThanOrEqualTo": operator.le,
}


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _show(value: Any) -> str:
    return "null" if value is None else to_text(value) if not isinstance(value, str) else repr(value)


def equal(left: Any, right: Any) -> bool:
    if isinstance(left, bool) or isinstance(right, bool):
        if isinstance(left, bool) and isinstance(right, bool):
            return left is right
        other, flag = (right, left) if isinstance(left, bool) else (left, right)
        return isinstance(other, str) and other.strip().lower() == ("true" if flag else "false")
    if _is_number(left) or _is_number(right):
        a, b = _number(left), _number(right)
        return a is not None and b is not None and a == b
    if isinstance(left, str) and isinstance(right, str):
        return left == right
    if left is None or right is None:
        return left is right
    return bool(left == right)


def compare(kind: str, left: Any, right: Any) -> bool:
    """One comparison condition's truth."""
    if kind == "Equals":
        return equal(left, right)
    order = _ORDER[kind]
    if _is_number(left) or _is_number(right):
        a, b = _number(left), _number(right)
        if a is not None and b is not None:
            return order(a, b)
    elif isinstance(left, str) and isinstance(right, str):
        a, b = _number(left), _number(right)
        if a is not None and b is not None:
            return order(a, b)
        return order(left, right)
    raise EvaluationError(
        f"Condition {kind} cannot compare {_show(left)} with {_show(right)}: both sides must be numbers, or both text."
    )


def holds(condition: Condition, evaluator: Evaluator) -> bool:
    if isinstance(condition, Comparison):
        return compare(condition.type, evaluator.value(condition.left), evaluator.value(condition.right))
    if isinstance(condition, InValues):
        query = evaluator.value(condition.query)
        return any(equal(query, evaluator.value(v)) for v in condition.values)
    if isinstance(condition, NotCondition):
        return not holds(condition.condition, evaluator)
    return any(holds(c, evaluator) for c in condition.conditions)


def outcome(step: Step, evaluator: Evaluator) -> bool:
    """A condition step's outcome: True when every one of its Conditions holds (its IfSteps run), else False."""
    return all(holds(c, evaluator) for c in step.conditions)
