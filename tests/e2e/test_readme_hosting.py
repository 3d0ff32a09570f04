"""The README's boto3 hosting example, run as written: the python block after ``<!-- hosting-example`` goes to a
real interpreter in a subprocess, against a real ``servekit up``, configured only through the environment the
README's shell line sets up (``eval "$(servekit env)"``, run by bash)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from servekit.testing.hosting import UpProcess
from servekit.tools.demo.build import iris_sklearn

pytestmark = pytest.mark.e2e
README = Path(__file__).resolve().parents[2] / "README.md"
MARKER = "<!-- hosting-example"


def example() -> str:
    text = README.read_text()
    assert text.count(MARKER) == 1, f"README.md must mark exactly one block with {MARKER!r}"
    match = re.search(re.escape(MARKER) + r"[^\n]*-->\n```python\n(.*?)\n```\n", text, re.DOTALL)
    assert match, f"the {MARKER} comment must come right before a ```python fence"
    return match.group(1) + "\n"


def test_the_block_is_marked_and_uses_the_environment_only() -> None:
    code = example()
    assert 'boto3.client("sagemaker")' in code and "endpoint_url" not in code
    assert "aws_secret_access_key" not in code
    for step in ("create_model", "create_endpoint_config", "create_endpoint(", "invoke_endpoint", "delete_endpoint("):
        assert step in code
    assert "update_endpoint_weights_and_capacities" in code and '"endpoint_deleted"' in code


def test_the_readme_boto3_example_runs(up: UpProcess, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    script = work / "hosting_example.py"
    script.write_text(example())

    # The README's shell line, run by a shell: eval "$(servekit env)" with the home the README's servekit up made
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SAGEMAKER_"))}  # nothing of the caller's
    env.update(
        SERVEKIT_HOME=str(up.home),
        SERVEKIT=f"{sys.executable} -m servekit.cli.main",
        AWS_CONFIG_FILE=str(tmp_path / "no-aws-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "no-aws-credentials"),
        # two versions of a model of four features, the width of the README's body
        MODEL_DIR=str(iris_sklearn(tmp_path / "models" / "v1" / "1").parent),
        CANDIDATE_DIR=str(iris_sklearn(tmp_path / "models" / "v2" / "1", c=0.01).parent),
        PYTHONUNBUFFERED="1",
    )
    assert 'eval "$(servekit env)"' in README.read_text()
    shell = f'eval "$($SERVEKIT env)" && exec {shlex.quote(sys.executable)} {shlex.quote(str(script))}'
    run = subprocess.run(["bash", "-c", shell], cwd=work, env=env, capture_output=True, text=True, timeout=110)
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}\n{up.log.read_text()[-3000:]}"
    lines = run.stdout.splitlines()
    # the README's row is a setosa: class 0 from either version
    assert lines[0] in ("('current', {'predictions': [0]})", "('candidate', {'predictions': [0]})"), run.stdout
    assert lines[1] == "('candidate', {'predictions': [0]})"
    assert lines[2] == "{'current': 0.0, 'candidate': 1.0}"

    # It cleans up after itself: nothing is left in the control plane.
    sm = up.sm()
    assert sm.list_endpoints()["Endpoints"] == []
    assert sm.list_endpoint_configs()["EndpointConfigs"] == []
    assert sm.list_models()["Models"] == []
