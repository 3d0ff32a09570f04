"""Peer servers for the benchmark (``python benchmarks/run.py --peers mlserver,torchserve,bentoml,rayserve``).

Each peer is a module here (``peers/<peer>.py``) that knows how to
1. ``install``: create ``benchmarks/.venvs/<peer>`` on first use and pip-install its pinned ``REQUIREMENTS``;
2. ``prepare``: lay out the SAME ``tiny`` ONNX file the way the peer wants it (each runs it with onnxruntime);
3. ``serve``: start it on loopback ports and yield the one-row inference URL once it answers ready;
4. ``payload``: the request body for one row in the peer's protocol.
``run_peer`` drives a module through that and hands each URL to run.py's wrk loop. A peer that cannot be
installed or started raises ``PeerError``: run_peer records why and the rest of the benchmark goes on.
``installed`` tells whether a peer's venv is ready, so that a default run measures only the peers already
installed and says how to install the others.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import requests

PEERS = ("mlserver", "torchserve", "bentoml", "rayserve")
VENVS = Path(__file__).resolve().parent.parent / ".venvs"
# pip's own ``torch`` would be a CUDA build; the CPU wheel on this machine is this exact version.
TORCH_PIN = "torch==2.13.0"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# pip's notes on this machine's empty extra indexes; TorchServe's probe for GPUs
NOISE = ("WARNING: Location", "nvidia-smi not available")


class PeerError(RuntimeError):
    """A peer could not be installed, prepared or started; the message says why."""


def tail(path: Path, lines: int = 4) -> str:
    """The last few error lines of a log (a whole traceback is in the log itself), else its last lines."""
    with contextlib.suppress(OSError):
        text = [ln for ln in path.read_text(errors="replace").splitlines() if not ln.startswith(NOISE)]
        errors = [ln.strip() for ln in text[-200:] if re.search(r"Error|Exception|error:|No such|not found", ln)]
        return "\n".join(errors[-lines:] or text[-2 * lines :])
    return ""


def ensure_venv(name: str, requirements: list[str], log: Path) -> Path:
    """``benchmarks/.venvs/<name>`` with exactly ``requirements`` pip-installed (once); returns its python."""
    venv = VENVS / name
    python = venv / "bin" / "python"
    marker = venv / "servekit-requirements.txt"
    wanted = "\n".join(requirements) + "\n"
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        return python
    print(f"peer {name}: installing {' '.join(requirements)} into {venv} (first use; log {log})", flush=True)
    with log.open("ab") as out:
        steps = [
            [sys.executable, "-m", "venv", str(venv)],
            [str(python), "-m", "pip", "install", "--disable-pip-version-check", *requirements],
        ]
        for cmd in steps:
            if subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT).returncode != 0:
                raise PeerError(f"`{' '.join(cmd)}` failed:\n{tail(log)}")
    marker.write_text(wanted)
    return python


def installed(name: str) -> bool:
    """Whether ``benchmarks/.venvs/<name>`` holds exactly the peer's pinned requirements (no install needed)."""
    requirements = load(name).REQUIREMENTS
    venv = VENVS / name
    marker = venv / "servekit-requirements.txt"
    wanted = "\n".join(requirements) + "\n"
    return (venv / "bin" / "python").exists() and marker.exists() and marker.read_text() == wanted


def versions(python: Path, packages: list[str]) -> dict[str, str]:
    """Installed versions of ``packages`` in the peer's venv."""
    code = (
        "import importlib.metadata as m, json, sys\n"
        "out = {}\n"
        "for p in sys.argv[1:]:\n"
        "    try: out[p] = m.version(p)\n"
        "    except m.PackageNotFoundError: out[p] = 'missing'\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run([str(python), "-c", code, *packages], capture_output=True, text=True)
    if done.returncode != 0:
        raise PeerError(f"cannot read versions from {python}: {done.stderr.strip()[-500:]}")
    return dict(json.loads(done.stdout))


@contextlib.contextmanager
def process(
    cmd: list[str], log: Path, ready: Callable[[], bool], timeout: float, cwd: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``cmd`` in its own process group, wait until ``ready()``; SIGINT (then SIGKILL) the group on exit."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + timeout
            while True:
                if proc.poll() is not None:
                    raise PeerError(f"{Path(cmd[0]).name} exited with {proc.returncode}; log {log}:\n{tail(log)}")
                with contextlib.suppress(requests.RequestException):
                    if ready():
                        break
                if time.monotonic() > deadline:
                    raise PeerError(f"not ready after {timeout:.0f} s; log {log}:\n{tail(log)}")
                time.sleep(0.3)
            yield proc
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            # children that left the group leader behind (a JVM, worker processes)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


def load(name: str) -> ModuleType:
    if name not in PEERS:
        raise PeerError(f"unknown peer {name!r}; known: {', '.join(PEERS)}")
    return importlib.import_module(f"peers.{name}")


def run_peer(
    name: str,
    model_onnx: Path,
    row: list[float],
    work: Path,
    logs: Path,
    measure: Callable[[str, str, str], list[str]],
) -> dict[str, Any]:
    """Install, prepare, serve and measure one peer; never raises. ``measure(label, url, payload)`` runs wrk and
    returns the run keys it wrote. Returns ``{"versions", "setup", "runs", "status"}`` for RESULTS.md."""
    info: dict[str, Any] = {"versions": {}, "setup": "", "runs": [], "status": "ok"}
    failures = []
    try:
        mod = load(name)
        info["setup"] = mod.SETUP
        python = mod.install(logs / f"{name}-install.log")
        info["versions"] = versions(python, mod.PACKAGES)
        payload = mod.payload(row)
        for variant in mod.VARIANTS:
            label = f"{name} tiny{' ' + variant if variant else ''}"
            try:
                dest = work / name / (variant or "plain").replace(" ", "_")
                prepared = mod.prepare(python, model_onnx, dest, variant)
                with mod.serve(python, prepared, logs / f"{label.replace(' ', '_')}.log") as url:
                    r = requests.post(url, data=payload, headers={"Content-Type": "application/json"}, timeout=30)
                    if r.status_code != 200:
                        raise PeerError(f"one-row request answered {r.status_code}: {r.text[:300]}")
                    info["runs"] += measure(label, url, payload)
            except Exception as e:  # a peer's failure must not stop the benchmark
                failures.append(f"{label}: {type(e).__name__}: {e}")
                print(f"peer {label} FAILED: {e}", flush=True)
    except Exception as e:
        failures.append(f"{name}: {type(e).__name__}: {e}")
        print(f"peer {name} FAILED: {e}", flush=True)
    if failures:
        info["status"] = "failed: " + " | ".join(failures)
    return info
