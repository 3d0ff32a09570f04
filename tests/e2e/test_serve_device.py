"""``servekit serve --device`` and ``--per_process_gpu_memory_fraction`` on a machine without a GPU (CI's; on a
machine with one, ``CUDA_VISIBLE_DEVICES=""`` hides them, as it hides them from CUDA): auto serves on the CPU and
says so, an explicit cuda refuses to start, bad values are refused at the edge."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests


@pytest.fixture(autouse=True)
def _no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "servekit.cli.main", "serve", "--host", "127.0.0.1", "--rest_api_port", "0", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:1"])
def test_an_explicit_cuda_refuses_to_start_without_a_gpu(demo_repo: Path, device: str) -> None:
    proc = _serve("--model_base_path", str(demo_repo / "iris"), "--device", device)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"servekit: --device {device}: this machine has no GPU" in proc.stderr
    assert "--device auto or --device cpu" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--device", "gpu"), "--device must be auto, cpu, cuda or cuda:N (N a GPU index), got 'gpu'"),
        (("--device", "cpu:1"), "--device must be auto, cpu, cuda or cuda:N"),
        (("--per_process_gpu_memory_fraction", "1.5"), "per_process_gpu_memory_fraction must be within 0..1"),
        (("--per-process-gpu-memory-fraction", "-0.1"), "per_process_gpu_memory_fraction must be within 0..1"),
    ],
)
def test_bad_device_flags_exit_2_with_what_was_expected(demo_repo: Path, args: tuple[str, ...], message: str) -> None:
    proc = _serve("--model_base_path", str(demo_repo / "iris"), *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_auto_serves_on_the_cpu_and_says_so(demo_repo: Path, server_factory: Callable[..., Any]) -> None:
    server = server_factory(
        "--model_base_path", str(demo_repo / "iris"), "--per_process_gpu_memory_fraction", "0.4"
    )  # the fraction is accepted and has nothing to bound here
    server.wait_ready()
    r = requests.post(f"{server.url}/v1/models/iris:predict", json={"instances": [[5.1, 3.5, 1.4, 0.2]]}, timeout=10)
    assert r.status_code == 200, r.text
    log = server.log()
    assert log.count("--device auto: no GPU on this machine, serving on the CPU") == 1
    placed = [line for line in log.splitlines() if "(onnxruntime) runs on" in line]
    assert len(placed) == 1, log  # one line per model (iris serves its latest version)
    assert all("runs on the CPU (no GPU on this machine; CPUExecutionProvider)" in line for line in placed), placed


def test_cpu_says_it_was_asked(demo_repo: Path, server_factory: Callable[..., Any]) -> None:
    server = server_factory("--model_base_path", str(demo_repo / "iris"), "--device", "cpu")
    server.wait_ready()
    assert "runs on the CPU (--device cpu; CPUExecutionProvider)" in server.log()
    assert "no GPU on this machine, serving" not in server.log()
