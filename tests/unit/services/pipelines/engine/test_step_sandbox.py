"""The pieces of running servekit-format steps in the jobs' sandbox (issue 44): a run servekit up started loads
its pipeline without importing it and hashes its functions the same; a step's result files are never read through
a link; the sandbox's folders and environment. tests/e2e/test_hostile_jobs.py runs a step in it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from servekit.services.pipelines.definition.loading import Unloaded, load_pipeline
from servekit.services.pipelines.definition.steps import StepKind
from servekit.services.pipelines.engine.hashing import code_hash
from servekit.services.pipelines.engine.local_engine import StepTask, read_result
from servekit.services.pipelines.engine.step_sandbox import STEP_ENVIRONMENT, StepSandbox

STEPS = """
import functools


def noted(fn):
    return functools.wraps(fn)(lambda *a, **k: fn(*a, **k))


@noted
def train(ctx):
    return {"n": 1}
"""


def _definition(tmp_path: Path) -> Path:
    (tmp_path / "steps.py").write_text(STEPS)
    doc = {"Name": "p", "Steps": [{"Name": "train", "Type": "Training", "Function": "steps.py:train"}]}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_function_checked_not_imported_hashes_as_the_imported_one(tmp_path: Path) -> None:
    path = _definition(tmp_path)
    unloaded = load_pipeline(str(path), import_code=False).step("train")
    assert isinstance(unloaded.function, Unloaded)
    before = code_hash(unloaded)
    assert before == code_hash(load_pipeline(str(path)).step("train"))
    (tmp_path / "steps.py").write_text(STEPS.replace('"n": 1', '"n": 2'))
    assert code_hash(load_pipeline(str(path), import_code=False).step("train")) != before


def _task(tmp_path: Path, command: tuple[str, ...] = ()) -> StepTask:
    workdir = tmp_path / "attempt-1"
    workdir.mkdir()
    return StepTask(
        "p", "r1", "train", StepKind.TRAINING, 1, "p.json", {}, {}, (), str(tmp_path / "out"), workdir, "", {}, command
    )


def test_a_result_or_properties_file_linked_elsewhere_is_not_read(tmp_path: Path) -> None:
    secret = tmp_path / "credentials.json"
    secret.write_text(json.dumps({"ok": True, "properties": {"secret": "s3cr3t"}}))
    task = _task(tmp_path)
    (task.workdir / "result.json").symlink_to(secret)
    outcome = read_result(task, 0)
    assert not outcome.ok and "without a result" in outcome.message and "s3cr3t" not in repr(outcome)
    (tmp_path / "c").mkdir()
    command = _task(tmp_path / "c", ("true",))
    (command.workdir / "properties.json").symlink_to(secret)
    outcome = read_result(command, 0)
    assert "s3cr3t" not in repr(outcome)


def test_the_sandbox_mounts_what_the_step_reads_first_and_never_a_folder_holding_the_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    definition = _definition(tmp_path)  # its Function file sits in tmp_path, which holds the home
    upstream = home / "artifacts" / "p" / "r0" / "prep"
    upstream.mkdir(parents=True)
    workdir = home / "pipelines" / "r1" / "train" / "attempt-1"
    workdir.mkdir(parents=True)
    own = home / "artifacts" / "p" / "r1" / "train"
    sandbox = StepSandbox(home, sys.executable, {"AWS_ACCESS_KEY_ID": "ASIAEXAMPLE"})
    layout = sandbox.layout(workdir, str(definition), [str(own)], [str(upstream)])
    mounts = [(str(src), rw) for src, _, rw in layout.mounts]
    assert mounts == [
        (str(upstream), False),
        (str(definition), False),
        (str(tmp_path / "steps.py"), False),  # the file, not tmp_path (which would show the home)
        (str(workdir), True),
        (str(own), True),
    ]
    assert own.is_dir() and layout.hidden == [home] and layout.chdir == str(workdir)
    env = sandbox.env({"AWS_SECRET_ACCESS_KEY": "admin", "SERVEKIT_STEP": "train", STEP_ENVIRONMENT: "{}", "TZ": "UTC"})
    assert env["AWS_ACCESS_KEY_ID"] == "ASIAEXAMPLE" and env["SERVEKIT_STEP"] == "train" and env["TZ"] == "UTC"
    assert "AWS_SECRET_ACCESS_KEY" not in env and STEP_ENVIRONMENT not in env and env["HOME"] == "/tmp"
