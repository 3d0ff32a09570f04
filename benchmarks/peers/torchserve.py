"""TorchServe serving the ``tiny`` ONNX file through a custom onnxruntime handler, with batching.

``torchserve_handler.py`` runs the very same model.onnx (no TorchScript copy needed). The archive is built
with torch-model-archiver; the model is registered through the management API with ``batch_size`` 64 and
``max_batch_delay`` 1 ms (servekit's tiny batching settings) and one worker. Inference, management, metrics
and both gRPC endpoints bind 127.0.0.1; token auth is off (``disable_token_authorization``), the model API is
on so that the archive in the local model store can be registered. The request body is servekit's own V1
``{"instances": [row]}`` POSTed to /predictions/tiny. Needs Java 11+ on PATH (or JAVA_HOME).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import requests

from peers import TORCH_PIN, PeerError, ensure_venv, free_port, process, tail

# Installed and measured here: torchserve / torch-model-archiver 0.12.0 are the latest releases; torch is pinned
# to the CPU wheel on this machine so pip never pulls a CUDA build; the 0.12.0 worker imports yaml without
# declaring PyYAML ("No module named 'yaml'"), so it is listed too.
REQUIREMENTS = ["torchserve==0.12.0", "torch-model-archiver==0.12.0", TORCH_PIN, "onnxruntime==1.32.0", "pyyaml==6.0.4"]
PACKAGES = ["torchserve", "torch-model-archiver", "torch", "onnxruntime", "numpy", "pyyaml"]
VARIANTS = ("batching",)
BATCH_SIZE = 64
MAX_BATCH_DELAY_MS = 1
WORKERS = 1
SETUP = (
    f"custom onnxruntime handler on the same model.onnx; servekit's V1 body to /predictions/tiny;"
    f" batch_size {BATCH_SIZE}, max_batch_delay {MAX_BATCH_DELAY_MS} ms, {WORKERS} worker; Java frontend; logs at warn"
)
HERE = Path(__file__).resolve().parent
# TorchServe's default log4j2.xml writes an access-log line and per-request model metrics; servekit and MLServer
# run without access logs, so TorchServe gets the same: warnings and errors (worker tracebacks) to stdout only.
QUIET_LOG4J2 = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration>
  <Appenders>
    <Console name="STDOUT" target="SYSTEM_OUT"><PatternLayout pattern="%d{ISO8601} [%-5p] %t %c - %m%n"/></Console>
  </Appenders>
  <Loggers>
    <Logger name="org.pytorch.serve.ModelServer" level="info"/>
    <Root level="warn"><AppenderRef ref="STDOUT"/></Root>
  </Loggers>
</Configuration>
"""


def install(log: Path) -> Path:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise PeerError("TorchServe needs Java 11+ (java not on PATH, JAVA_HOME unset): apt-get install openjdk-17-jre")
    return ensure_venv("torchserve", REQUIREMENTS, log)


def prepare(python: Path, model_onnx: Path, dest: Path, variant: str) -> Path:
    """``dest/store/tiny.mar`` archived from the ONNX file and the handler; returns ``dest``."""
    if variant != "batching":
        raise PeerError(f"unknown torchserve variant {variant!r}")
    store = dest / "store"
    store.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(model_onnx, dest / "model.onnx")
    shutil.copyfile(HERE / "torchserve_handler.py", dest / "torchserve_handler.py")
    cmd = [
        str(python.parent / "torch-model-archiver"),
        "--model-name",
        "tiny",
        "--version",
        "1.0",
        "--serialized-file",
        str(dest / "model.onnx"),
        "--handler",
        str(dest / "torchserve_handler.py"),
        "--export-path",
        str(store),
        "--force",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0 or not (store / "tiny.mar").exists():
        raise PeerError(f"torch-model-archiver failed ({done.returncode}): {(done.stdout + done.stderr)[-800:]}")
    return dest


@contextlib.contextmanager
def serve(python: Path, prepared: Path, log: Path) -> Iterator[str]:
    inference, management, metrics = free_port(), free_port(), free_port()
    grpc_inference, grpc_management = free_port(), free_port()
    tmp = prepared / "tmp"  # pid file, worker sockets, JVM temp files: private to this run
    tmp.mkdir(exist_ok=True)
    config = prepared / "config.properties"
    config.write_text(
        f"inference_address=http://127.0.0.1:{inference}\n"
        f"management_address=http://127.0.0.1:{management}\n"
        f"metrics_address=http://127.0.0.1:{metrics}\n"
        f"grpc_inference_address=127.0.0.1\ngrpc_inference_port={grpc_inference}\n"
        f"grpc_management_address=127.0.0.1\ngrpc_management_port={grpc_management}\n"
        f"initial_worker_port={random.randint(20000, 29000)}\n"
        f"model_store={prepared / 'store'}\n"
        "disable_token_authorization=true\n"
        "enable_model_api=true\n"
        "allowed_urls=file://.*\n"
        "default_workers_per_model=1\n"
        "disable_system_metrics=true\n"
    )
    log_config = prepared / "log4j2.xml"
    log_config.write_text(QUIET_LOG4J2)
    cmd = [
        str(python.parent / "torchserve"),
        "--start",
        "--foreground",
        "--ncs",
        "--disable-token-auth",
        "--enable-model-api",
        "--ts-config",
        str(config),
        "--log-config",
        str(log_config),
        "--model-store",
        str(prepared / "store"),
    ]
    env = {"TMPDIR": str(tmp), "TEMP": str(tmp), "PATH": f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}"}

    def ready() -> bool:
        return requests.get(f"http://127.0.0.1:{inference}/ping", timeout=2).status_code == 200

    with process(cmd, log, ready, timeout=180, cwd=prepared, env=env):
        r = requests.post(
            f"http://127.0.0.1:{management}/models",
            params={
                "url": "tiny.mar",
                "model_name": "tiny",
                "batch_size": BATCH_SIZE,
                "max_batch_delay": MAX_BATCH_DELAY_MS,
                "initial_workers": WORKERS,
                "synchronous": "true",
                "response_timeout": 120,
            },
            timeout=180,
        )
        if r.status_code != 200:
            reason = " ".join(r.text.split())[:300]
            raise PeerError(f"registering tiny.mar answered {r.status_code}: {reason}; log {log}:\n{tail(log)}")
        yield f"http://127.0.0.1:{inference}/predictions/tiny"


def payload(row: list[float]) -> str:
    """servekit's own one-row V1 body; the handler reads ``instances``."""
    return json.dumps({"instances": [row]})
