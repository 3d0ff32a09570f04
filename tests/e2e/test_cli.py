"""The ``servekit`` command line, run as real subprocesses: inspect, demo, serve's argument checks, config files."""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

pytestmark = pytest.mark.e2e

ROW = [5.9, 3.0, 4.2, 1.5]


def _servekit() -> list[str]:
    """The installed console script, as a user runs it (``python -m`` where the script is not installed)."""
    script = Path(sys.executable).parent / "servekit"
    return [str(script)] if script.exists() else [sys.executable, "-m", "servekit.cli.main"]


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*_servekit(), *args], capture_output=True, text=True, timeout=timeout, check=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _status(url: str, model: str) -> list[tuple[str, str]]:
    r = requests.get(f"{url}/v1/models/{model}", timeout=5)
    assert r.status_code == 200, r.text
    return [(s["version"], s["state"]) for s in r.json()["model_version_status"]]


def _predict_version(url: str, model: str, version: int | None = None) -> requests.Response:
    path = f"/v1/models/{model}" + (f"/versions/{version}" if version is not None else "") + ":predict"
    return requests.post(url + path, json={"instances": [ROW]}, timeout=5)


# ---- inspect ---------------------------------------------------------------------------------------------------


def test_inspect_prints_signatures_like_saved_model_cli(demo_repo: Path) -> None:
    proc = run_cli("inspect", str(demo_repo / "iris" / "1"))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "Runtime: onnxruntime_onnx" in out
    assert "signature_def['serving_default']:" in out
    # saved_model_cli's block for one tensor, line for line
    serving = out.split("signature_def['serving_default']:", 1)[1].split("signature_def[", 1)[0]
    assert (
        "  The given SignatureDef contains the following input(s):\n"
        "    inputs['X'] tensor_info:\n"
        "        dtype: DT_FLOAT\n"
        "        shape: (-1, 4)\n"
        "        name: X\n"
        "  The given SignatureDef contains the following output(s):\n"
    ) in serving
    assert "    outputs['probabilities'] tensor_info:\n        dtype: DT_FLOAT\n        shape: (-1, 3)\n" in serving
    assert "    outputs['label'] tensor_info:\n        dtype: DT_INT64\n        shape: (-1,)\n" in serving
    assert "  Method name is: tensorflow/serving/predict" in serving
    assert "signature_def['classify']:" in out
    assert "Method name is: tensorflow/serving/classify" in out


def test_inspect_sklearn_model(demo_repo: Path) -> None:
    proc = run_cli("inspect", str(demo_repo / "diabetes" / "1"))
    assert proc.returncode == 0, proc.stderr
    assert "Runtime: sklearn" in proc.stdout
    assert "signature_def['serving_default']:" in proc.stdout
    assert "dtype: DT_DOUBLE\n        shape: (-1, 10)" in proc.stdout
    assert "Method name is: tensorflow/serving/regress" in proc.stdout


@pytest.mark.parametrize("case", ["missing", "corrupt", "empty"])
def test_inspect_refuses_a_bad_version_dir_with_exit_2(tmp_path: Path, case: str) -> None:
    version = tmp_path / "m" / "1"
    if case != "missing":
        version.mkdir(parents=True)
    if case == "corrupt":
        (version / "model.onnx").write_bytes(b"\x00not onnx\xff" * 10)
    proc = run_cli("inspect", str(version))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("servekit: "), proc.stderr
    assert "Traceback" not in proc.stderr
    assert {"missing": "does not exist", "corrupt": "model.onnx", "empty": "no runtime"}[case] in proc.stderr


# ---- demo ------------------------------------------------------------------------------------------------------


def _curl_commands(tour: str) -> list[str]:
    """Every curl command of the printed tour, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", "", tour)
    return [line.strip() for line in joined.splitlines() if line.strip().startswith("curl ")]


def test_demo_build_only_builds_models_and_prints_working_curl_examples(
    tmp_path: Path, server_factory: Callable[..., Any]
) -> None:
    directory = tmp_path / "demo-models"
    port, sm_port = _free_port(), _free_port()
    proc = run_cli(
        "demo", "--build-only", "--dir", str(directory), "--port", str(port), "--sagemaker-port", str(sm_port)
    )
    assert proc.returncode == 0, proc.stderr
    for f in (
        "models.config",
        "iris/1/model.onnx",
        "iris/2/model.onnx",
        "iris_sklearn/1/model.joblib",
        "diabetes/1/model.joblib",
        "iris_handler/1/code/inference.py",
    ):
        assert (directory / f).is_file(), f
    out = proc.stdout
    for section in ("# TF Serving REST", "# KServe V2", "# SageMaker"):
        assert section in out
    commands = _curl_commands(out)
    urls = " ".join(commands)
    assert f"http://localhost:{port}/v1/models/iris:predict" in urls
    assert f"http://localhost:{port}/v2/models/iris/infer" in urls
    assert f"http://localhost:{sm_port}/invocations" in urls
    assert f"http://localhost:{sm_port}/ping" in urls

    # The printed requests work, verbatim, against a server on the built models (curl through bash,
    # since the examples use $'...' quoting).
    if shutil.which("curl") is None or shutil.which("bash") is None:
        pytest.skip("curl and bash are needed to run the printed examples")
    srv = server_factory(
        "--model_config_file", str(directory / "models.config"), "--sagemaker_port", str(sm_port), port=port
    )
    srv.wait_ready()
    for cmd in commands:
        runnable = cmd.replace("curl ", "curl -sS --fail ", 1).replace("//localhost:", "//127.0.0.1:")
        res = subprocess.run(["bash", "-c", runnable], capture_output=True, text=True, timeout=30, check=False)
        assert res.returncode == 0, f"{cmd}\n-> rc {res.returncode}: {res.stdout}{res.stderr}\n{srv.log()}"
        if "http_code" in cmd:
            assert res.stdout.strip() == "200", cmd


def test_demo_prints_its_requests_once_the_server_answers_and_says_how_to_stop(tmp_path: Path) -> None:
    """``make demo`` (issue 46): the requests come after the server listens, with a line saying it is ready and
    how to stop it; the first printed request works the moment that line is read."""
    port, sm_port = _free_port(), _free_port()
    argv = [sys.executable, "-m", "servekit.cli.main", "demo", "--dir", str(tmp_path / "demo-models")]
    argv += ["--port", str(port), "--sagemaker-port", str(sm_port)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        for line in proc.stdout:  # the test's timeout bounds this read
            lines.append(line.rstrip("\n"))
            if line.startswith("servekit demo is ready"):
                break
        assert lines[-1] == "servekit demo is ready: the requests above work now. Ctrl-C stops it."
        starting = next(i for i, ln in enumerate(lines) if ln.startswith("starting the server"))
        tour = lines.index("# TF Serving REST")
        assert starting < tour, "the requests are printed only once the server listens"
        first = requests.get(f"http://127.0.0.1:{port}/v1/models/iris", timeout=10)
        assert first.status_code == 200, first.text
        assert requests.get(f"http://127.0.0.1:{sm_port}/ping", timeout=10).status_code == 200
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


# ---- serve: argument checks ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "nothing to serve"),
        (("--rest_api_port", "0"), "nothing to serve"),
        (("--model_config_file", "x.config", "--model_name", "iris"), "not both"),
        (("--model_config_file", "/nonexistent/models.yaml"), "/nonexistent/models.yaml"),
    ],
)
def test_serve_without_a_usable_model_exits_2(args: tuple[str, ...], message: str) -> None:
    proc = run_cli("serve", "--host", "127.0.0.1", *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


# ---- serve: YAML and TOML model configs ------------------------------------------------------------------------


def test_serve_yaml_config_with_specific_versions(
    demo_repo: Path, tmp_path: Path, server_factory: Callable[..., Any]
) -> None:
    shutil.copytree(demo_repo / "iris", tmp_path / "models" / "iris")  # versions 1 and 2 on disk
    config = tmp_path / "models.yaml"
    config.write_text(
        "model_config_list:\n"
        "  - name: flowers\n"
        "    base_path: models/iris\n"  # relative to the config file
        "    model_version_policy: {specific: {versions: [1]}}\n"
    )
    srv = server_factory("--model_config_file", str(config), "--file_system_poll_wait_seconds", "0")
    srv.wait_ready()
    assert _status(srv.url, "flowers") == [("1", "AVAILABLE")]
    r = _predict_version(srv.url, "flowers")
    assert r.status_code == 200, r.text
    assert r.headers["x-servekit-model-version"] == "1"
    assert _predict_version(srv.url, "flowers", 2).status_code == 404
    assert requests.get(f"{srv.url}/v1/models/iris", timeout=5).status_code == 404


def test_serve_toml_config_with_two_models(demo_repo: Path, tmp_path: Path, server_factory: Callable[..., Any]) -> None:
    config = tmp_path / "models.toml"
    config.write_text(
        "[[model_config_list]]\n"
        'name = "iris"\n'
        f'base_path = "{demo_repo / "iris"}"\n'
        "model_version_policy = { specific = { versions = [2] } }\n"
        "version_labels = { stable = 2 }\n"
        "\n"
        "[[model_config_list]]\n"
        'name = "iris_sklearn"\n'
        f'base_path = "{demo_repo / "iris_sklearn"}"\n'
    )
    srv = server_factory("--model_config_file", str(config), "--file_system_poll_wait_seconds", "0")
    srv.wait_ready()
    assert _status(srv.url, "iris") == [("2", "AVAILABLE")]
    assert _status(srv.url, "iris_sklearn") == [("1", "AVAILABLE")]
    r = requests.post(f"{srv.url}/v1/models/iris/labels/stable:predict", json={"instances": [ROW]}, timeout=5)
    assert r.status_code == 200, r.text
    assert r.headers["x-servekit-model-version"] == "2"
    assert _predict_version(srv.url, "iris", 1).status_code == 404
    assert _predict_version(srv.url, "iris_sklearn").status_code == 200


# uvicorn shuts down gracefully, then re-raises the signal, so the exit status may report it (as a shell
# sees Ctrl-C: 130) or the process may end by the signal itself (SIGTERM: -15 from Popen).
@pytest.mark.parametrize(("sig", "codes"), [(signal.SIGINT, (0, 130)), (signal.SIGTERM, (0, -signal.SIGTERM))])
def test_serve_shuts_down_gracefully_on_a_signal(
    demo_repo: Path, server_factory: Callable[..., Any], sig: signal.Signals, codes: tuple[int, int]
) -> None:
    srv = server_factory("--model_base_path", str(demo_repo / "iris"), "--model_name", "iris")
    srv.wait_ready()
    assert _predict_version(srv.url, "iris").status_code == 200
    srv.proc.send_signal(sig)
    assert srv.proc.wait(timeout=30) in codes, srv.log()
    log = srv.log()
    assert "model iris version 2 unloaded" in log
    assert "Application shutdown complete" in log
    assert "Traceback" not in log, log
