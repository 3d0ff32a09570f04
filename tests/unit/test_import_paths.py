"""What the three-wings move (serving/, services/, tools/) must not break for users: the import paths they write
(``servekit.locust``, ``servekit.testing``, ``servekit.runtime.base`` for a runtime plugin, ``servekit.pipelines``
for the DSL, ``servekit.capture.reader``), the ``servekit.runtimes`` entry-point group, ``python -m`` module names
that docs, systemd units and jobs print, and a state database written before the move."""

from __future__ import annotations

import importlib
import sqlite3
import sys
from pathlib import Path

import pytest

from servekit import _aliases
from servekit.services.database import StateDB
from servekit.state.migrations import schema_versions

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("servekit.locust", "servekit.tools.locust"),
        ("servekit.locust.steps", "servekit.tools.locust.steps"),
        ("servekit.runtime.base", "servekit.serving.runtime.base"),
        ("servekit.pipelines", "servekit.services.pipelines"),
        ("servekit.pipelines.examples.iris", "servekit.services.pipelines.examples.iris"),
        ("servekit.capture.record", "servekit.serving.capture.record"),
        ("servekit.server.core", "servekit.serving.core.assembly"),
        ("servekit.serving.manager", "servekit.serving.core.manager"),
        ("servekit.inference.schema", "servekit.serving.schema"),
        ("servekit.state.hosting", "servekit.services.hosting.store"),
        ("servekit.monitor.drift.verdict", "servekit.services.monitoring.drift.verdict"),
    ],
)
def test_an_old_import_path_is_the_module_at_its_new_place(old: str, new: str) -> None:
    """The very module object (a second copy would hold classes of its own: isinstance and registries break)."""
    assert importlib.import_module(old) is importlib.import_module(new)
    assert sys.modules[old] is sys.modules[new]


def test_names_through_an_old_package_are_the_same_objects() -> None:
    from servekit.locust import Step
    from servekit.pipelines import Pipeline
    from servekit.runtime.base import Servable

    from servekit.services.pipelines import Pipeline as NewPipeline
    from servekit.serving.runtime.base import Servable as NewServable
    from servekit.tools.locust.steps import Step as NewStep

    assert (Servable, Pipeline, Step) == (NewServable, NewPipeline, NewStep)


def test_paths_that_never_existed_still_fail() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("servekit.locust.no_such_module")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("servekit.no_such_package")
    assert _aliases.new_name("servekit.testing.hosting") is None  # servekit.testing did not move
    assert _aliases.new_name("servekit.cli.main") is None


def test_servekit_testing_and_the_runtime_group_are_where_they_were() -> None:
    from servekit.serving.runtime.registry import RuntimeRegistry
    from servekit.testing import clock

    assert clock.__name__ == "servekit.testing.clock"
    source = Path(importlib.import_module("servekit.serving.runtime.registry").__file__ or "").read_text()
    assert 'entry_points(group="servekit.runtimes")' in source
    assert RuntimeRegistry.__module__ == "servekit.serving.runtime.registry"


def test_python_dash_m_runs_an_old_module_name() -> None:
    """``python -m servekit.<old path>`` resolves through the aliases to the new module's code (runpy asks the
    loader for it), as a job image or a unit written before the move would run it."""
    import runpy

    name, spec, code = runpy._get_module_details("servekit.monitor.baseline.analyzer")  # type: ignore[attr-defined]
    new = importlib.util.find_spec("servekit.services.monitoring.baseline.analyzer")
    assert new is not None and new.origin is not None
    assert code.co_filename == new.origin
    assert name == "servekit.monitor.baseline.analyzer" and spec is not None


# aggregates servekit gained after 1047e21: their own tables, nothing else touched
ADDED_SINCE = {"iam": 1, "kms": 1, "tags": 1}
# migrations of existing aggregates since: (aggregate, version, the prefix of the tables they add)
MIGRATED_SINCE = (("monitoring", 2, "monitoring_alert"),)


def _of_added(line: str) -> bool:
    """A dump line that belongs to an aggregate added since (its tables, their sequence rows, its schema row), or to
    a migration added since to an existing aggregate (the tables it made, its schema row)."""
    return any(
        f'"{aggregate}_' in line
        or f"TABLE {aggregate}_" in line
        or f"'{aggregate}_" in line
        or f"'{aggregate}'," in line
        for aggregate in ADDED_SINCE
    ) or any(
        f'"{prefix}' in line
        or f"TABLE {prefix}" in line
        or f"INDEX {prefix}" in line
        or f"'{prefix}" in line
        or f"VALUES('{aggregate}',{version}," in line
        for aggregate, version, prefix in MIGRATED_SINCE
    )


def test_a_database_written_before_the_move_opens_unchanged(tmp_path: Path) -> None:
    """tests/fixtures/state_before_wings.sql is ``sqlite3 .dump`` of a home written by 1047e21 (every store in
    servekit.state): the same aggregates at the same versions, so opening it migrates nothing and reads its rows."""
    path = tmp_path / "servekit.db"
    with sqlite3.connect(path) as conn:
        conn.executescript((FIXTURES / "state_before_wings.sql").read_text())
    with sqlite3.connect(path) as conn:
        before = schema_versions(conn)  # type: ignore[arg-type]
        dump = list(conn.iterdump())
    assert before and all(v >= 1 for v in before.values())
    with StateDB.open(tmp_path) as db:
        # the same aggregates at the same versions; aggregates added since are made beside them
        migrated = {aggregate: version for aggregate, version, _ in MIGRATED_SINCE}
        assert schema_versions(db.conn) == {**before, **ADDED_SINCE, **migrated}
        assert db.hosting.get_model("m1") is not None
        assert db.hosting.get_endpoint_config("c1") is not None
        assert db.sagemaker_jobs.get("training", "job1") is not None
    with sqlite3.connect(path) as conn:
        after = [line for line in conn.iterdump() if not _of_added(line)]
    assert after == dump  # not a byte of the old schema or data changed
