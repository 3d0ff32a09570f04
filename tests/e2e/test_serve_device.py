"""``servekit serve --device`` and ``--per_process_gpu_memory_fraction`` on a machine without a GPU (CI's; on a
machine with one, ``CUDA_VISIBLE_DEVICES=""`` hides them, as it hides them from CUDA): auto serves on the CPU and
says so, an explicit cuda refuses to start, bad values are refused at the edge. Then beside one GPU described by
an ``nvidia-smi`` on PATH: an index it lacks refuses to start, and this machine's CPU build of onnxruntime serves
on the CPU with the reason (auto) or fails the model's load saying why (an explicit cuda)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
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


@pytest.fixture
def one_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine with one T4 as far as servekit can tell: an ``nvidia-smi`` on PATH that lists it (the one part
    that cannot run here); the runtimes installed here are CPU builds, so they say why they cannot use it."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho '0, Tesla T4, 15360, GPU-00000000-fake'\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)  # set to "" by _no_gpu, which runs first


def test_a_gpu_index_the_machine_lacks_refuses_to_start(demo_repo: Path, one_gpu: None) -> None:
    proc = _serve("--model_base_path", str(demo_repo / "iris"), "--device", "cuda:1")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "servekit: --device cuda:1: this process sees 1 GPU(s), indices 0-0" in proc.stderr


def test_beside_a_gpu_a_cpu_runtime_says_why(
    demo_repo: Path, one_gpu: None, server_factory: Callable[..., Any]
) -> None:
    auto = server_factory("--model_base_path", str(demo_repo / "iris"))
    auto.wait_ready()
    assert "no GPU on this machine" not in auto.log()
    assert "(onnxruntime) runs on the CPU (onnxruntime here has no CUDAExecutionProvider (available:" in auto.log()
    cuda = server_factory(
        "--model_base_path", str(demo_repo / "iris"), "--device", "cuda", "--max_num_load_retries", "0"
    )
    expected = "--device cuda: onnxruntime here has no CUDAExecutionProvider (available:"
    deadline = time.monotonic() + 60
    status: dict[str, Any] = {}
    while time.monotonic() < deadline and cuda.proc.poll() is None:  # poll the model's state, with a deadline
        try:
            status = requests.get(f"{cuda.url}/v1/models/iris", timeout=2).json()
        except requests.RequestException:
            status = {}
        versions = status.get("model_version_status") or []
        if versions and versions[0]["state"] == "END":
            break
        time.sleep(0.1)
    (version,) = status["model_version_status"]
    assert version["state"] == "END"
    assert version["status"]["error_message"].startswith(expected)
