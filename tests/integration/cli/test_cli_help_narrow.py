"""Help at 80 columns and piped (issue 46, item 9): rich's option tables cut long option names and values with
"…" there, so the command line prints click's plain help, which wraps and never cuts. Run as a user runs it, a
process with its output in a pipe, as the commands the issue named."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CASES = [
    (("serve",), "--per_process_gpu_memory_fraction"),
    (("transform", "run"), "--max-concurrent-transforms"),
    (("up",), "postgresql://"),
]


@pytest.mark.parametrize("columns", ["80", None])
def test_narrow_or_piped_help_cuts_nothing(columns: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TERMINAL_WIDTH")}
    if columns:
        env["COLUMNS"] = columns
    for command, whole in CASES:
        done = subprocess.run(
            [sys.executable, "-m", "servekit.cli.main", *command, "--help"],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "…" not in done.stdout, done.stdout
        assert whole in done.stdout, (command, done.stdout)
        assert max(len(line) for line in done.stdout.splitlines()) <= 100
