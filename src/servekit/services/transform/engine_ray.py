"""``--engine ray``: the same job on Ray Data, with an actor pool of ``InstanceCount`` actors.

Each actor loads the model once (its constructor) and transforms whole objects with the same
:class:`ObjectRunner` as the local engine, so outputs are byte-identical. The dataset holds one row per
object and batches of one row, so an object never splits across actors; Ray hands objects to whichever
actor is free. ``--ray-address`` joins an existing cluster (which must see the same input and output
paths); otherwise a local Ray is started for the job and shut down after it. Progress is per object.
Needs the ``ray`` extra (``pip install 'servekit[ray]'``).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
from typing import Any

from servekit._utils.ctrl_c import CtrlC
from servekit.errors import ConfigError
from servekit.services.transform.engine import (
    EngineEvents,
    RunOptions,
    intra_op_threads,
    make_invoker,
    tune_instance_process,
)
from servekit.services.transform.object_runner import ObjectResult, ObjectRunner, ObjectTask
from servekit.services.transform.spec import TransformSpec
from servekit.services.transform.status import ObjectStatus


def _ray() -> Any:
    try:
        return importlib.import_module("ray")
    except ImportError as exc:
        raise ConfigError(f"--engine ray needs Ray: pip install 'servekit[ray]' ({exc})") from None


class RayInstance:
    """The Ray Data actor: one model, whole objects."""

    def __init__(self, spec: TransformSpec, tasks: list[ObjectTask], intra_op: int) -> None:
        os.environ.update(dict(spec.environment))
        self._tasks = tasks
        self._invoker = make_invoker(spec, intra_op)
        tune_instance_process()
        self._runner = ObjectRunner(spec, self._invoker, os.getpid())

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {k: [] for k in ("key", "status", "records", "errors", "message", "instance")}
        for index in batch["index"]:
            task = self._tasks[int(index)]
            try:
                result = self._runner.run(task)
            except Exception as exc:  # a bug must fail this object, not the others
                result = ObjectResult(task.obj.key, ObjectStatus.FAILED, message=f"internal error: {exc!r}")
            out["key"].append(result.key)
            out["status"].append(result.status.value)
            out["records"].append(result.records)
            out["errors"].append(result.errors)
            out["message"].append(result.message)
            out["instance"].append(os.getpid())
        return out


class RayEngine:
    def __init__(self, options: RunOptions) -> None:
        self._options = options

    def run(
        self, spec: TransformSpec, shards: list[list[ObjectTask]], events: EngineEvents, ctrl_c: CtrlC | None = None
    ) -> bool:
        ray = _ray()
        data = importlib.import_module("ray.data")
        tasks = [t for s in shards for t in s]
        if not tasks:
            return False
        instances = min(spec.instance_count, len(tasks))
        started_here = not ray.is_initialized()
        if started_here:
            if self._options.ray_address:
                ray.init(address=self._options.ray_address, logging_level=logging.WARNING, log_to_driver=False)
            else:
                ray.init(
                    num_cpus=max(os.cpu_count() or 1, instances),
                    include_dashboard=False,
                    logging_level=logging.WARNING,
                    log_to_driver=False,
                )
        logging.getLogger("ray.data").setLevel(logging.ERROR)
        context = data.DataContext.get_current()
        context.enable_progress_bars = False
        context.print_on_execution_start = False
        sizes = {t.obj.key: t.obj.size for t in tasks}
        # Ray's iterator blocks with no descriptor to wake it: Ctrl-C raises here, as by default.
        interruptible = ctrl_c.raising() if ctrl_c is not None else contextlib.nullcontext()
        try:
            with interruptible:
                ds = data.from_items([{"index": i} for i in range(len(tasks))], override_num_blocks=len(tasks))
                ds = ds.map_batches(
                    RayInstance,
                    batch_size=1,
                    batch_format="numpy",
                    compute=data.ActorPoolStrategy(size=instances),
                    fn_constructor_kwargs={
                        "spec": spec,
                        "tasks": tasks,
                        "intra_op": intra_op_threads(self._options, instances),
                    },
                    num_cpus=1,
                )
                for row in ds.iter_rows():
                    result = ObjectResult(
                        key=str(row["key"]),
                        status=ObjectStatus(str(row["status"])),
                        records=int(row["records"]),
                        errors=int(row["errors"]),
                        message=str(row["message"]),
                        instance=int(row["instance"]),
                    )
                    events.on_progress(result.records + result.errors, sizes.get(result.key, 0))
                    events.on_object(result)
        except KeyboardInterrupt:
            events.on_stopping()
            return True
        except Exception as exc:  # Ray wraps actor start failures (model load) in its own exception types
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            events.on_fatal(0, f"Ray could not run the job: {lines[-1] if lines else type(exc).__name__}")
        finally:
            if started_here:
                ray.shutdown()
        return False
