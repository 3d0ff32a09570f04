"""Where pipelines come from: a Python object (``package.module:name`` or ``path/to/file.py:name``, a
:class:`Pipeline` or a function returning one) or a YAML/JSON file in servekit's definition format. The one place
that imports user code (no ``sys.path`` changes: files load through ``spec_from_file_location``)."""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from servekit.services.pipelines.definition.conditions import condition_from_json
from servekit.services.pipelines.definition.pipeline import Parameter, ParameterType, Pipeline
from servekit.services.pipelines.definition.refs import from_json
from servekit.services.pipelines.definition.steps import (
    METRICS_OUTPUT,
    TRANSFORM_OUTPUT,
    CacheConfig,
    RetryPolicy,
    Step,
    StepKind,
    parse_duration,
)
from servekit.services.pipelines.errors import PipelineError

YAML_SUFFIXES = (".yaml", ".yml", ".json")
_STEP_KEYS = {
    "Name",
    "Type",
    "Function",
    "Command",
    "Arguments",
    "Outputs",
    "DependsOn",
    "Reads",
    "Code",
    "TimeoutSeconds",
    "RetryPolicies",
    "CacheConfig",
}
_TOP_KEYS = {"Version", "Name", "Parameters", "Steps", "MaxParallelExecutionSteps"}


def normalize_source(source: str) -> str:
    """``source`` with a file path made absolute, so a child process (or a resume elsewhere) finds it again."""
    if source.endswith(YAML_SUFFIXES):
        return str(Path(source).resolve())
    target, sep, name = source.rpartition(":")
    if sep and target.endswith(".py"):
        return f"{Path(target).resolve()}:{name}"
    return source


def load_pipeline(source: str, *, import_code: bool = True) -> Pipeline:
    """The pipeline ``source`` names (see the module's docstring); :class:`PipelineError` naming what is wrong.
    ``import_code`` False (a definition file only) checks its functions without importing them."""
    if source.endswith(YAML_SUFFIXES):
        return load_yaml(Path(source), import_code=import_code)
    if not import_code:
        raise PipelineError(f"{source} is Python: only a definition document can be checked without running it")
    target = _load_object(source)
    if callable(target) and not isinstance(target, Pipeline):
        target = target()
    if not isinstance(target, Pipeline):
        raise PipelineError(f"{source} is a {type(target).__name__}, not a Pipeline (or a function returning one)")
    return target


def _load_object(source: str) -> Any:
    target, sep, name = source.rpartition(":")
    if not sep or not target or not name:
        raise PipelineError(
            f"{source!r} names no pipeline: give package.module:name, path/to/file.py:name or a .yaml file"
        )
    module = _load_file(Path(target)) if target.endswith(".py") else _import(target)
    obj: Any = module
    for part in name.split("."):
        if not hasattr(obj, part):
            raise PipelineError(f"{target} has no {name!r}")
        obj = getattr(obj, part)
    return obj


def _import(module: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise PipelineError(f"cannot import {module!r}: {exc}") from None


def _load_file(path: Path) -> ModuleType:
    path = path.resolve()
    if not path.is_file():
        raise PipelineError(f"no Python file {path}")
    name = "servekit_pipeline_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PipelineError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look their module up by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


# ---- YAML ------------------------------------------------------------------------------------------------------


def load_yaml(path: Path, *, import_code: bool = True) -> Pipeline:
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise PipelineError(f"cannot read {path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise PipelineError(f"{path} is not valid YAML/JSON: {exc}") from None
    return pipeline_from_document(doc, base=path.resolve().parent, where=str(path), import_code=import_code)


def pipeline_from_document(doc: Any, *, base: Path, where: str, import_code: bool = True) -> Pipeline:
    """A pipeline from servekit's definition document (what :meth:`Pipeline.to_document` writes); relative paths
    (``Code``, ``Function`` files) are taken from ``base``. With ``import_code`` False no user code runs: each
    ``Function`` is checked where it is written (its module found without importing it, the name bound at its top
    level) and stands as a function that refuses to be called (what CreatePipeline checks a definition with)."""
    if not isinstance(doc, Mapping):
        raise PipelineError(f"{where}: a pipeline definition is a mapping with Name, Parameters and Steps")
    unknown = set(doc) - _TOP_KEYS
    if unknown:
        raise PipelineError(f"{where}: unknown field(s) {sorted(unknown)}; known: {sorted(_TOP_KEYS)}")
    steps_doc = doc.get("Steps")
    if not isinstance(steps_doc, list) or not steps_doc:
        raise PipelineError(f"{where}: Steps must be a non-empty list")
    params_doc = doc.get("Parameters") or []
    if not isinstance(params_doc, list):
        raise PipelineError(f"{where}: Parameters must be a list of {{Name, Type, DefaultValue}}")
    params = [_parameter(p, f"{where}: Parameters[{i}]") for i, p in enumerate(params_doc)]
    steps = [_step(s, base, f"{where}: Steps[{i}]", import_code) for i, s in enumerate(steps_doc)]
    extra: dict[str, Any] = {}
    if "MaxParallelExecutionSteps" in doc:
        extra["max_parallel"] = _number(doc["MaxParallelExecutionSteps"], f"{where}: MaxParallelExecutionSteps", int)
    return Pipeline(str(doc.get("Name") or ""), tuple(steps), tuple(params), **extra)


def _parameter(doc: Any, where: str) -> Parameter:
    if not isinstance(doc, Mapping) or "Name" not in doc:
        raise PipelineError(f"{where}: a parameter is {{Name, Type, DefaultValue}}")
    try:
        kind = ParameterType(doc.get("Type", "String"))
    except ValueError:
        raise PipelineError(f"{where}: Type must be String, Integer, Float or Boolean, not {doc['Type']!r}") from None
    return Parameter(str(doc["Name"]), kind, doc.get("DefaultValue"))


def _number(value: Any, where: str, kind: Callable[[Any], Any] = float) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PipelineError(f"{where}: a number, got {value!r}")
    return kind(value)


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PipelineError(f"{where}: a list of names, got {value!r}")
    return tuple(value)


def _step(doc: Any, base: Path, where: str, import_code: bool = True) -> Step:
    if not isinstance(doc, Mapping):
        raise PipelineError(f"{where}: a step is a mapping with Name and Type")
    where = f"{where} ({doc.get('Name', '?')})"
    unknown = set(doc) - _STEP_KEYS
    if unknown:
        raise PipelineError(f"{where}: unknown field(s) {sorted(unknown)}; known: {sorted(_STEP_KEYS)}")
    try:
        kind = StepKind(str(doc.get("Type")))
    except ValueError:
        known = ", ".join(k.value for k in StepKind)
        raise PipelineError(f"{where}: Type {doc.get('Type')!r} is not a step type; known: {known}") from None
    args = doc.get("Arguments") or {}
    if not isinstance(args, Mapping):
        raise PipelineError(f"{where}: Arguments must be a mapping")
    fields: dict[str, Any] = {"name": str(doc.get("Name") or ""), "kind": kind}
    outputs = _strings(doc.get("Outputs", []), f"{where}.Outputs")
    if kind is StepKind.EVALUATION and METRICS_OUTPUT not in outputs:
        outputs = (METRICS_OUTPUT, *outputs)
    if kind is StepKind.TRANSFORM:
        outputs = (TRANSFORM_OUTPUT,)
    fields["outputs"] = outputs
    fields["depends_on"] = _strings(doc.get("DependsOn", []), f"{where}.DependsOn")
    reads = doc.get("Reads", [])
    if not isinstance(reads, list):
        raise PipelineError(f"{where}.Reads: a list of storage prefixes")
    fields["reads"] = tuple(from_json(r, f"{where}.Reads") for r in reads)
    fields["code"] = tuple(str((base / c).resolve()) for c in _strings(doc.get("Code", []), f"{where}.Code"))
    if "TimeoutSeconds" in doc:
        fields["timeout_s"] = _number(doc["TimeoutSeconds"], f"{where}.TimeoutSeconds")
    policies = doc.get("RetryPolicies", [])
    if not isinstance(policies, list):
        raise PipelineError(f"{where}.RetryPolicies: a list of retry policies")
    fields["retry"] = tuple(_retry(r, f"{where}.RetryPolicies[{i}]") for i, r in enumerate(policies))
    if "CacheConfig" in doc:
        fields["cache"] = _cache(doc["CacheConfig"], f"{where}.CacheConfig")
    if kind is StepKind.CONDITION:
        conds = args.get("Conditions")
        if not isinstance(conds, list) or not conds:
            raise PipelineError(f"{where}: Arguments.Conditions must be a non-empty list")
        fields["conditions"] = tuple(condition_from_json(c, f"{where}.Conditions[{i}]") for i, c in enumerate(conds))
        fields["if_steps"] = _strings(args.get("IfSteps", []), f"{where}.IfSteps")
        fields["else_steps"] = _strings(args.get("ElseSteps", []), f"{where}.ElseSteps")
        return Step(**fields)
    fields["arguments"] = from_json(dict(args), f"{where}.Arguments")
    if "Function" in doc:
        fn, path = _function(doc["Function"], base, f"{where}.Function", import_code)
        fields["function"], fields["function_path"] = fn, path
    if "Command" in doc:
        cmd = doc["Command"]
        if not isinstance(cmd, list) or not cmd:
            raise PipelineError(f"{where}.Command: a non-empty list (argv)")
        fields["command"] = tuple(from_json(c, f"{where}.Command") for c in cmd)
    return Step(**fields)


def _function(value: Any, base: Path, where: str, import_code: bool = True) -> tuple[Callable[..., Any], str]:
    if not isinstance(value, str) or ":" not in value:
        raise PipelineError(f"{where}: package.module:function or file.py:function, got {value!r}")
    target, _, name = value.rpartition(":")
    if target.endswith(".py"):
        target = str((base / target).resolve())
    if not import_code:
        origin = _check_unimported(target, name, where)
        return Unloaded(f"{target}:{name}", origin), f"{target}:{name}"
    obj = _load_object(f"{target}:{name}")
    if isinstance(obj, Step):  # a decorated function: take the function it wraps
        if obj.function is None:
            raise PipelineError(f"{where}: {value} is a {obj.kind} step, not a function")
        obj = obj.function
    if not callable(obj):
        raise PipelineError(f"{where}: {value} is not a function")
    return obj, f"{target}:{name}"


class Unloaded:
    """A step's function checked but not imported (CreatePipeline, and the runs servekit up starts, run no user code
    outside the sandbox): refuses to be called; its :meth:`source` is read from its file."""

    def __init__(self, path: str, origin: str = "") -> None:
        self.path = path
        self.origin = origin  # the file it is defined in
        self.__module__, _, self.__qualname__ = path.rpartition(":")

    def source(self) -> str:
        """The function's source as ``inspect.getsource`` gives an imported one (decorators included), read from
        its file; the whole file when the name is bound otherwise (an import, an assignment)."""
        text = Path(self.origin).read_text()
        name = self.__qualname__.split(".")[0]
        for node in ast.parse(text, self.origin).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == name:
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                lines = text.splitlines(keepends=True)
                return "".join(lines[first - 1 : node.end_lineno])
        return text

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise PipelineError(f"{self.path} was checked, not imported: load the pipeline with its code to run it")


def _check_unimported(target: str, name: str, where: str) -> str:
    """``target`` (a file, or a module found on ``sys.path`` without importing it or its packages) binds ``name``'s
    first part at its top level; :class:`PipelineError` naming what is missing. Nothing of it runs. The file it is
    in."""
    if target.endswith(".py"):
        origin = target
        if not Path(origin).is_file():
            raise PipelineError(f"{where}: no Python file {origin}")
    elif target == "servekit" or target.startswith("servekit."):  # servekit's own (old names too): safe to import
        try:
            origin = getattr(importlib.import_module(target), "__file__", None) or ""
        except ImportError:
            origin = ""
        if not origin.endswith(".py"):
            raise PipelineError(f"{where}: no module {target!r} in servekit")
    else:
        spec, search = None, None
        parts = target.split(".")
        for i in range(len(parts)):
            loaded = sys.modules.get(".".join(parts[: i + 1]))
            if loaded is not None and loaded.__spec__ is not None:  # already imported (servekit's own): no code runs
                spec = loaded.__spec__
            else:
                spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: i + 1]), search)
            if spec is None:
                raise PipelineError(f"{where}: no module {'.'.join(parts[: i + 1])!r} on this Python's path")
            search = spec.submodule_search_locations
        origin = spec.origin if spec is not None and spec.origin else ""
        if not origin.endswith(".py"):
            raise PipelineError(f"{where}: {target} is not a Python source module")
    try:
        tree = ast.parse(Path(origin).read_text(), origin)
    except (OSError, SyntaxError, ValueError) as exc:
        raise PipelineError(f"{where}: {origin} cannot be read as Python: {exc}") from None
    if name.split(".")[0] not in _top_level_names(tree):
        raise PipelineError(f"{where}: {target} defines no {name.split('.')[0]!r} at its top level")
    return origin


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _retry(doc: Any, where: str) -> RetryPolicy:
    if not isinstance(doc, Mapping):
        raise PipelineError(f"{where}: {{ExceptionType, IntervalSeconds, BackoffRate, MaxAttempts}}")
    if "ExpireAfterMin" in doc:
        raise PipelineError(f"{where}: ExpireAfterMin is not supported; give MaxAttempts")
    return RetryPolicy(
        errors=_strings(doc.get("ExceptionType", []), f"{where}.ExceptionType"),
        interval_s=_number(doc.get("IntervalSeconds", 1), f"{where}.IntervalSeconds"),
        backoff_rate=_number(doc.get("BackoffRate", 2.0), f"{where}.BackoffRate"),
        max_attempts=_number(doc.get("MaxAttempts", 5), f"{where}.MaxAttempts", int),
    )


def _cache(doc: Any, where: str) -> CacheConfig:
    if not isinstance(doc, Mapping):
        raise PipelineError(f"{where}: {{Enabled: true, ExpireAfter: P30D}}")
    enabled = doc.get("Enabled", True)
    if not isinstance(enabled, bool):
        raise PipelineError(f"{where}.Enabled: true or false, got {enabled!r}")
    expire = doc.get("ExpireAfter")
    return CacheConfig(enabled, parse_duration(str(expire), f"{where}.ExpireAfter") if expire else None)
