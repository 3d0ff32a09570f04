"""The README's boto3 hosting example, run as written: the python block after ``<!-- hosting-example`` goes to a
real interpreter in a subprocess, against a real ``servekit up``, configured only through the environment the
README's shell lines set up (endpoint URLs, region, and a key from ``eval "$(servekit keys create ...)"``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from servekit.testing.hosting import UpProcess, scaling_model

pytestmark = pytest.mark.e2e
README = Path(__file__).resolve().parents[2] / "README.md"
MARKER = "<!-- hosting-example"


def example() -> str:
    text = README.read_text()
    assert text.count(MARKER) == 1, f"README.md must mark exactly one block with {MARKER!r}"
    match = re.search(re.escape(MARKER) + r"[^\n]*-->\n```python\n(.*?)\n```\n", text, re.DOTALL)
    assert match, f"the {MARKER} comment must come right before a ```python fence"
    return match.group(1) + "\n"


def shell_exports(stdout: str) -> dict[str, str]:
    """What ``eval`` of ``export NAME=value`` lines sets."""
    found = dict(re.findall(r"^export (\w+)=(\S+)$", stdout, re.MULTILINE))
    assert set(found) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}, stdout
    return found


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

    # The README's shell lines: a key from `servekit keys create` (eval'd), the endpoint URLs and the region.
    created = subprocess.run(
        [sys.executable, "-m", "servekit.cli.main", "keys", "create", "--scope", "admin", "--name", "notebook"],
        capture_output=True,
        text=True,
        env={**os.environ, "SERVEKIT_HOME": str(up.home)},
        timeout=60,
    )
    assert created.returncode == 0, created.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}  # nothing from the caller's AWS setup
    env.update(
        shell_exports(created.stdout),
        AWS_ENDPOINT_URL_SAGEMAKER=up.url,
        AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME=up.url,
        AWS_DEFAULT_REGION="us-east-1",
        AWS_CONFIG_FILE=str(tmp_path / "no-aws-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "no-aws-credentials"),
        MODEL_DIR=str(scaling_model(tmp_path / "models", "v1", 2.0)),
        CANDIDATE_DIR=str(scaling_model(tmp_path / "models", "v2", 3.0)),
        PYTHONUNBUFFERED="1",
    )
    run = subprocess.run([sys.executable, str(script)], cwd=work, env=env, capture_output=True, text=True, timeout=110)
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}\n{up.log.read_text()[-3000:]}"
    lines = run.stdout.splitlines()
    assert lines[0] in ("('current', {'out': [2.0, 4.0]})", "('candidate', {'out': [3.0, 6.0]})"), run.stdout
    assert lines[1] == "('candidate', {'out': [3.0, 6.0]})"
    assert lines[2] == "{'current': 0.0, 'candidate': 1.0}"

    # It cleans up after itself: nothing is left in the control plane.
    sm = up.sm()
    assert sm.list_endpoints()["Endpoints"] == []
    assert sm.list_endpoint_configs()["EndpointConfigs"] == []
    assert sm.list_models()["Models"] == []
