"""A data-quality job's baseline: servekit's own (a ``servekit monitor baseline`` folder or a baselining job's output),
SageMaker's own ``statistics.json`` / ``constraints.json`` (what the SDK's ``Statistics.from_file_path`` and
``Constraints.from_file_path`` upload), or none at all (executions then compute the window's statistics only, as
SageMaker's do).

When the job definition or schedule is created or updated, each file named must be there and be a JSON object (else a
ValidationException naming it). Its shape is checked, and the files converted, by the monitor when each execution
starts (:mod:`~servekit.services.monitoring.baseline.from_sagemaker`): a file of the wrong shape fails that execution
with a FailureReason naming the file and the field. That is when SageMaker reads them too, and it takes a schedule
whose StatisticsResource names a constraints.json (the SDK's ``Session.update_monitoring_schedule`` copies the
schedule's ConstraintsResource into StatisticsResource when an update names no baseline). The control plane imports
no numpy and keeps no converted copy; a file replaced in S3 is used by the next execution. An execution copies the
files it was given into ``<output>/.baseline/`` first (the two may be under different prefixes; the monitor reads one
folder), which is not put into S3 with the reports.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servekit.services.monitoring.baseline import sagemaker_files as files
from servekit.services.monitoring.schedules.locations import JobSpecError, ObjectPaths, local_path

STAGED = ".baseline"  # under an execution's output folder: SageMaker's files as the monitor reads them


@dataclass(frozen=True, slots=True)
class BaselineSource:
    """Exactly one of: ``folder`` (servekit's baseline) or SageMaker's files (either or both local paths)."""

    folder: str | None = None
    statistics: str | None = None
    constraints: str | None = None


def resolve(config: Mapping[str, Any], where: str, objects: ObjectPaths) -> BaselineSource | None:
    """The baseline a ``DataQualityBaselineConfig`` (or a schedule's ``BaselineConfig``) names, checked; None when it
    names none."""
    uris = {
        key: str((config.get(key) or {}).get("S3Uri") or "") for key in ("ConstraintsResource", "StatisticsResource")
    }
    given = {key: uri for key, uri in uris.items() if uri}
    if not given:
        return None
    located = {key: _locate(uri, f"{where}.{key}.S3Uri", objects) for key, uri in given.items()}
    for folder, _ in located.values():
        if (folder / "CURRENT").is_file() or (folder / "baseline.json").is_file():
            return BaselineSource(folder=str(folder))  # servekit's own, as before: its summaries are finer
    paths: dict[str, Path] = {}
    for key, (folder, name) in located.items():
        default = files.CONSTRAINTS if key == "ConstraintsResource" else files.STATISTICS
        path = folder / (name or default)
        if not path.is_file():
            raise JobSpecError(
                f"{where}.{key}.S3Uri {given[key]!r}: no {name or default} there. servekit reads a baseline made by "
                "servekit monitor baseline or DefaultModelMonitor.suggest_baseline (a folder with baseline.json or "
                "CURRENT), or SageMaker's statistics.json and constraints.json."
            )
        paths[key] = path
    for key, path in paths.items():
        problem = _check(path, f"{where}.{key}.S3Uri {given[key]}")
        if problem:
            raise JobSpecError(f"{problem} (SageMaker Model Monitor's statistics.json / constraints.json)")
    statistics, constraints = paths.get("StatisticsResource"), paths.get("ConstraintsResource")
    return BaselineSource(
        statistics=None if statistics is None else str(statistics),
        constraints=None if constraints is None else str(constraints),
    )


# (path, size, mtime_ns, what) -> the file's problem ("" when none): the scheduler re-reads every schedule's plan on
# each tick, and parsing a large file each time would stall the event loop; a changed file is checked again.
_checked: dict[tuple[str, int, int, str], str] = {}
_CHECKED_MAX = 256


def _check(path: Path, what: str) -> str:
    """ "" when ``path`` holds a JSON object (its shape is the execution's to check), else what is wrong."""
    try:
        st = path.stat()
    except OSError as exc:
        return f"{what}: cannot be read ({exc.strerror or exc})."
    key = (str(path), st.st_size, st.st_mtime_ns, what)
    if key not in _checked:
        try:
            files.read_json(path, what)
            problem = ""
        except files.SageMakerFileError as exc:
            problem = str(exc)
        if len(_checked) >= _CHECKED_MAX:
            _checked.clear()
        _checked[key] = problem
    return _checked[key]


def _locate(uri: str, where: str, objects: ObjectPaths) -> tuple[Path, str]:
    """(the local folder ``uri`` is in or names, the file name it names or "")."""
    named = uri.rstrip("/").rsplit("/", 1)[-1] if uri.endswith(".json") else ""
    if uri.startswith("s3://"):
        prefix = uri.rsplit("/", 1)[0] if named else uri.rstrip("/")
        found = objects(prefix + "/")
        if found is None:
            raise JobSpecError(
                f"{where} {uri!r} is not in servekit up's own S3 store (no such bucket or prefix): servekit reads a "
                "baseline from this machine: a local path, a file:// URI or an s3:// URI of its own store."
            )
        return found, named
    path = Path(local_path(uri, where))
    return (path.parent, named) if named else (path, "")


def stage(source: BaselineSource, out: Path) -> Path:
    """The folder the monitor reads SageMaker's files from: ``<out>/.baseline/`` holding copies named as the monitor
    expects (the files may have other names and be under different prefixes)."""
    folder = out / STAGED
    folder.mkdir(parents=True, exist_ok=True)
    for given, name in ((source.statistics, files.STATISTICS), (source.constraints, files.CONSTRAINTS)):
        target = folder / name
        if given is None:
            target.unlink(missing_ok=True)
            continue
        if not Path(given).is_file():
            raise FileNotFoundError(f"The baseline's {name} {given} is gone: it was there when the schedule was made.")
        shutil.copyfile(given, target)
    return folder
