"""``servekit inspect`` prints what TensorFlow's own ``saved_model_cli show --all`` prints for the same SavedModel
(``make test-extras``). Not a unit test: saved_model_cli runs as a child process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

from tests.extras_models import tf1_saved_model, tf2_saved_model

from servekit.cli.model_cmd import render_signatures
from servekit.serving.runtime.registry import RuntimeRegistry

pytestmark = pytest.mark.extras


@pytest.fixture(scope="module")
def tf1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tf1_saved_model(tmp_path_factory.mktemp("tf1") / "1")


@pytest.fixture(scope="module")
def tf2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tf2_saved_model(tmp_path_factory.mktemp("tf2") / "1")


def _cli_show_all(path: Path) -> str:
    script = Path(sys.executable).parent / "saved_model_cli"
    if not script.exists():
        pytest.skip("saved_model_cli is not installed beside this Python")
    proc = subprocess.run(
        [str(script), "show", "--dir", str(path), "--all"], capture_output=True, text=True, timeout=90
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _ops(line: str) -> set[str]:
    inner = line.split("contains the following ops: ", 1)[1].strip()
    return {op.strip().strip("'") for op in inner.strip("{}").split(",")}


@pytest.mark.parametrize("which", ["tf1", "tf2"])
def test_inspect_prints_what_saved_model_cli_prints(which: str, request: pytest.FixtureRequest) -> None:
    path = request.getfixturevalue(which)
    s = RuntimeRegistry().load(path)
    ours = render_signatures(s.signatures, s.platform)
    assert ours.startswith("Runtime: tensorflow\n")
    ours_body = ours.split("\n", 1)[1]
    theirs = _cli_show_all(path)
    # saved_model_cli goes on with the object graph's concrete functions, which serving does not restore
    theirs_body = theirs.split("\nConcrete Functions:", 1)[0].rstrip("\n")
    ours_head, ours_ops = ours_body.rsplit("\n", 1)
    theirs_head, theirs_ops = theirs_body.rsplit("\n", 1)
    assert ours_head == theirs_head
    assert _ops(ours_ops) == _ops(theirs_ops)  # the cli prints a Python set, in hash order
