"""The README's TF Serving and KServe quickstart, run as written (issue 46: the quickstarts are run by a test): its
``servekit serve`` line's flags on the demo's iris model, then each request of the block marked
``<!-- serving-example`` through bash and curl, the port being the test's own."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e
README = Path(__file__).resolve().parents[2] / "README.md"
MARKER = "<!-- serving-example"


def requests_of_the_block() -> list[str]:
    text = README.read_text()
    assert text.count(MARKER) == 1
    match = re.search(re.escape(MARKER) + r"[^\n]*-->\n```bash\n(.*?)\n```\n", text, re.DOTALL)
    assert match, f"the {MARKER} comment must come right before a ```bash fence"
    joined = re.sub(r"\\\n\s*", "", match.group(1))
    return [re.sub(r"\s+#.*$", "", line).strip() for line in joined.splitlines() if line.startswith("curl ")]


def test_the_readme_requests_answer(demo_repo: Path, server_factory: Callable[..., Any]) -> None:
    if shutil.which("curl") is None:
        pytest.fail("curl is needed to run the README's requests as written")
    commands = requests_of_the_block()
    assert len(commands) == 3 and all("localhost:8501/" in c for c in commands)
    assert "--model_name iris --model_base_path" in README.read_text()
    srv = server_factory("--model_name", "iris", "--model_base_path", str(demo_repo / "iris"))
    srv.wait_ready()
    port = srv.url.rsplit(":", 1)[1].rstrip("/")
    for command in commands:
        runnable = command.replace("curl ", "curl -sS --fail ", 1).replace("localhost:8501", f"127.0.0.1:{port}")
        done = subprocess.run(["bash", "-c", runnable], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, f"{command}\n{done.stdout}{done.stderr}\n{srv.log()}"
        assert done.stdout.strip(), command
