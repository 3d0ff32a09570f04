"""The process one attempt of a function (or transform) step runs in:
``python -m servekit.services.pipelines.engine.worker TASK``.

Loads the pipeline from its source, calls the step's function with a least-privilege storage handle, and leaves
``result.json`` beside the task: the returned properties (or metrics), or the error with its class names so the
run can match retry policies."""

from __future__ import annotations

import math
import re
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from servekit.services.pipelines.access.context import StepContext
from servekit.services.pipelines.access.guard import GuardedStorage
from servekit.services.pipelines.definition.loading import load_pipeline
from servekit.services.pipelines.definition.steps import METRICS_FILE, METRICS_OUTPUT, StepKind
from servekit.services.pipelines.engine.local_engine import RESULT_FILE, StepTask
from servekit.services.pipelines.errors import StepFailure
from servekit.storage import Storage


def _json_mapping(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise StepFailure(f"the step's function must return a mapping of JSON values ({what}), not {type(value)}")
    try:
        return dict(
            orjson.loads(orjson.dumps(dict(value), option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY))
        )
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise StepFailure(f"the {what} the step returned are not JSON: {exc}") from None


def run_function(task: StepTask, storage: GuardedStorage) -> tuple[dict[str, Any], dict[str, Any]]:
    step = load_pipeline(task.source).step(task.step)
    if step.function is None:
        raise StepFailure(f"step {task.step!r} has no function in {task.source}")
    ctx = StepContext(
        pipeline=task.pipeline,
        run_id=task.run_id,
        step=task.step,
        attempt=task.attempt,
        storage=storage,
        outputs=dict(task.outputs),
        parameters=dict(task.parameters),
    )
    result = step.function(ctx, **task.inputs)
    if task.kind is StepKind.EVALUATION:
        metrics = _json_mapping(result, "metrics")
        bad = [k for k, v in metrics.items() if isinstance(v, float) and not math.isfinite(v)]
        if bad:
            raise StepFailure(f"metrics {bad} are not finite numbers")
        ctx.write(METRICS_OUTPUT, METRICS_FILE, orjson.dumps(metrics, option=orjson.OPT_INDENT_2))
        return {}, metrics
    return _json_mapping(result, "properties"), {}


def _job_name(task: StepTask) -> str:
    raw = f"{task.pipeline}-{task.step}-{task.run_id}-{task.attempt}"
    return re.sub(r"-+", "-", re.sub(r"[^A-Za-z0-9-]", "-", raw)).strip("-")[:63].rstrip("-")


def run_transform(task: StepTask, storage: GuardedStorage) -> dict[str, Any]:
    from servekit.services.transform import JobStatus, JobStore, run_job, spec_from_request

    request = dict(task.inputs)
    name = str(request.get("TransformJobName") or _job_name(task))
    request["TransformJobName"] = name
    request["TransformOutput"] = {**(request.get("TransformOutput") or {}), "S3OutputPath": task.outputs["output"]}
    spec = spec_from_request(request)
    storage.check_read(spec.input_uri)
    if spec.model:
        storage.check_read(spec.model)
    with JobStore(Path(task.home)) as store:
        summary = run_job(spec, store)
    if summary.status not in (JobStatus.COMPLETED, JobStatus.COMPLETED_WITH_ERRORS):
        raise StepFailure(f"transform job {name} ended {summary.status}: {summary.failure_reason}")
    return {"TransformJobName": name}


def main(task_path: str) -> int:
    task = StepTask.from_json(orjson.loads(Path(task_path).read_bytes()))
    result = execute(task)
    (task.workdir / RESULT_FILE).write_bytes(orjson.dumps(result))
    return 0 if result["ok"] else 1


def execute(task: StepTask) -> dict[str, Any]:
    """Run the function or transform step here; the result document (what ``result.json`` holds)."""
    storage = GuardedStorage(Storage(), task.step, task.reads, task.write_prefix)
    result: dict[str, Any]
    try:
        if task.kind is StepKind.TRANSFORM:
            result = {"ok": True, "properties": run_transform(task, storage)}
        else:
            props, metrics = run_function(task, storage)
            result = {"ok": True, "properties": props, "metrics": metrics}
    except BaseException as exc:  # every failure becomes the result, with its class names
        traceback.print_exc()
        types = (
            exc.error_types
            if isinstance(exc, StepFailure) and exc.error_types
            else tuple(name for cls in type(exc).__mro__ for name in (cls.__name__, f"{cls.__module__}.{cls.__name__}"))
        )
        message = exc.message if isinstance(exc, StepFailure) else f"{type(exc).__name__}: {exc}"
        result = {"ok": False, "message": message, "error_types": list(dict.fromkeys(types))}
    return result


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
