"""The expressions a definition may hold anywhere in a step's Arguments, its conditions or its fail message, read
statically (pure): their shape is checked and the references they make are listed.

- ``{"Get": "Parameters.<name>"}``, ``{"Get": "Execution.<variable>"}``, ``{"Get": "Steps.<step>.<property path>"}``
- ``{"Std:Join": {"On": <text>, "Values": [<value>...]}}``
- ``{"Std:JsonGet": {"PropertyFile": {"Get": "Steps.<step>.PropertyFiles.<file>"}, "Path": <json path>}}``, or
  ``{"Std:JsonGet": {"S3Uri": <value>, "Path": <json path>}}``

Any other mapping or list is a literal whose members may be expressions."""

from __future__ import annotations

import enum
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servekit.services.pipelines.sagemaker.errors import DefinitionError
from servekit.services.pipelines.sagemaker.paths import PathSyntaxError, Segment, parse_path

JOIN = "Std:Join"
JSON_GET = "Std:JsonGet"
_STEP_REF = re.compile(r"Steps\.([A-Za-z0-9_\-]+)(?:\.(.*))?\Z", re.DOTALL)


class RefKind(enum.Enum):
    PARAMETER = "Parameters"
    EXECUTION = "Execution"
    STEP = "Steps"  # a property of a finished step
    PROPERTY_FILE = "PropertyFile"  # Steps.<step>.PropertyFiles.<file>, only inside Std:JsonGet


@dataclass(frozen=True, slots=True)
class Ref:
    """One ``Get``: ``name`` is the parameter, the execution variable, the step; ``path`` the property path below a
    step (its segments in ``segments``) or a property file's name."""

    kind: RefKind
    text: str  # the Get as written
    name: str
    path: str = ""
    segments: tuple[Segment, ...] = ()


def is_get(value: Any) -> bool:
    return isinstance(value, Mapping) and len(value) == 1 and "Get" in value


def is_function(value: Any) -> bool:
    return isinstance(value, Mapping) and len(value) == 1 and next(iter(value)).startswith("Std:")


def parse_get(text: Any, where: str, *, property_file: bool = False) -> Ref:
    """The reference ``{"Get": text}`` makes; :class:`DefinitionError` naming ``where`` when it is none."""
    if not isinstance(text, str) or not text:
        raise DefinitionError(f"{where}: Get takes a path such as Steps.<step>.<property>, got {text!r}")
    head, _, rest = text.partition(".")
    if head == "Parameters" and rest and "." not in rest:
        if not property_file:
            return Ref(RefKind.PARAMETER, text, rest)
    elif head == "Execution" and rest and "." not in rest:
        if not property_file:
            return Ref(RefKind.EXECUTION, text, rest)
    elif head == "Steps":
        m = _STEP_REF.match(text)
        if not m or not m.group(2):
            raise DefinitionError(f"{where}: {text!r} names no property; expected Steps.<step>.<property path>")
        step, path = m.group(1), m.group(2)
        file_head, _, file_name = path.partition(".")
        if file_head == "PropertyFiles":
            if not property_file or not file_name or "." in file_name:
                raise DefinitionError(
                    f"{where}: {text!r}: a step's PropertyFiles.<file> is read only by Std:JsonGet's PropertyFile"
                )
            return Ref(RefKind.PROPERTY_FILE, text, step, file_name)
        if property_file:
            raise DefinitionError(f"{where}: Std:JsonGet's PropertyFile must be Steps.<step>.PropertyFiles.<file>")
        try:
            segments = parse_path(path)
        except PathSyntaxError as exc:
            raise DefinitionError(f"{where}: invalid property reference {text!r}: {exc}") from None
        return Ref(RefKind.STEP, text, step, path, segments)
    if property_file:
        raise DefinitionError(f"{where}: Std:JsonGet's PropertyFile must be Steps.<step>.PropertyFiles.<file>")
    raise DefinitionError(
        f"{where}: invalid Get {text!r}; expected Parameters.<name>, Execution.<variable> or Steps.<step>.<property>"
    )


def references(value: Any, where: str) -> Iterator[Ref]:
    """Every reference in ``value`` (walked to any depth), checking each expression's shape on the way;
    :class:`DefinitionError` names ``where`` and the place inside it."""
    if isinstance(value, Mapping):
        if is_get(value):
            yield parse_get(value["Get"], where)
        elif is_function(value):
            yield from _function_refs(value, where)
        else:
            for k, v in value.items():
                yield from references(v, f"{where}.{k}")
    elif isinstance(value, Sequence) and not isinstance(value, str):
        for i, v in enumerate(value):
            yield from references(v, f"{where}[{i}]")


def _function_refs(value: Mapping[str, Any], where: str) -> Iterator[Ref]:
    name, spec = next(iter(value.items()))
    here = f"{where}.{name}"
    if name == JOIN:
        if not isinstance(spec, Mapping) or set(spec) - {"On", "Values"} or "Values" not in spec:
            raise DefinitionError(f"{here} takes {{On: <text>, Values: [<value>...]}}, got {_show(spec)}")
        if not isinstance(spec.get("On", ""), str):
            raise DefinitionError(f"{here}.On must be a string, got {_show(spec['On'])}")
        values = spec["Values"]
        if isinstance(values, str) or not isinstance(values, Sequence):
            raise DefinitionError(f"{here}.Values must be a list, got {_show(values)}")
        for i, v in enumerate(values):
            yield from references(v, f"{here}.Values[{i}]")
    elif name == JSON_GET:
        if not isinstance(spec, Mapping) or "Path" not in spec or len(set(spec) & {"PropertyFile", "S3Uri"}) != 1:
            raise DefinitionError(
                f"{here} takes {{PropertyFile: {{Get: Steps.<step>.PropertyFiles.<file>}}, Path: <json path>}} "
                f"or {{S3Uri: <value>, Path: <json path>}}, got {_show(spec)}"
            )
        if set(spec) - {"PropertyFile", "S3Uri", "Path"}:
            raise DefinitionError(f"{here}: unknown field(s) {sorted(set(spec) - {'PropertyFile', 'S3Uri', 'Path'})}")
        path = spec["Path"]
        if not isinstance(path, str):
            raise DefinitionError(f"{here}.Path must be a string JSON path, got {_show(path)}")
        try:
            parse_path(path, json_path=True)
        except PathSyntaxError as exc:
            raise DefinitionError(f"{here}.Path: {exc}") from None
        if "PropertyFile" in spec:
            pf = spec["PropertyFile"]
            if not is_get(pf):
                raise DefinitionError(f"{here}.PropertyFile must be {{Get: Steps.<step>.PropertyFiles.<file>}}")
            yield parse_get(pf["Get"], f"{here}.PropertyFile", property_file=True)
        else:
            yield from references(spec["S3Uri"], f"{here}.S3Uri")
    else:
        raise DefinitionError(f"{where}: unknown function {name!r}; servekit knows {JOIN} and {JSON_GET}")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
