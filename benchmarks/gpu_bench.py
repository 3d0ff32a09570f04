"""CPU against GPU for ONNX models, in process and through ``servekit serve`` with batching, in one run; and two
``servekit serve`` processes sharing one card under ``--per_process_gpu_memory_fraction 0.4``.

    python benchmarks/gpu_bench.py [--seconds 5] [--clients 16] [--out result.json]

Two models, built here with onnx.helper (fixed seed):

- ``mlp``: 512 -> 1024 -> 1024 -> 10 (ReLU), a row is 512 floats;
- ``ffn``: a transformer-sized feed-forward stack, 4 blocks of d_model 768 / d_ff 3072 with residuals over 32
  tokens, a row is 32 x 768 floats (the FLOPs of a BERT-base layer's FFN, without attention).

For each device (``cpu``, then ``cuda:0`` when this machine has a GPU that onnxruntime can use):

1. in process: an onnxruntime session on that device (servekit's own provider choice,
   ``runtime.devices.onnx_providers``), the mean time of a batch of 1 and of 64 rows;
2. through servekit: ``servekit serve --device <d> --enable_batching`` (on a GPU, the GPU batching defaults),
   ``--clients`` closed-loop clients each POSTing one row to TF Serving's REST predict for ``--seconds``:
   rows/s and p50/p99 latency.

Ratios are GPU / CPU of the same run. On a GPU, two more servers start on cuda:0 with
``--per_process_gpu_memory_fraction 0.4`` each; both must load and answer, and ``nvidia-smi`` reports what each
process holds. Without a GPU the script says so after the CPU half and exits 0. Loopback only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import requests

from servekit.config.models import DeviceRequest
from servekit.serving.runtime import devices

MODELS = {"mlp": (512,), "ffn": (32, 768)}


# ---- models -----------------------------------------------------------------------------------------------------


def _dense(nodes: list[Any], inits: list[Any], x: str, n_in: int, n_out: int, name: str, rng: Any) -> str:
    from onnx import helper, numpy_helper

    w = numpy_helper.from_array((rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32), f"{name}_w")
    b = numpy_helper.from_array(np.zeros(n_out, np.float32), f"{name}_b")
    inits += [w, b]
    nodes.append(helper.make_node("MatMul", [x, w.name], [f"{name}_mm"]))
    nodes.append(helper.make_node("Add", [f"{name}_mm", b.name], [f"{name}_out"]))
    return f"{name}_out"


def build_models(root: Path) -> dict[str, Path]:
    import onnx
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    out: dict[str, Path] = {}
    for name, shape in MODELS.items():
        nodes: list[Any] = []
        inits: list[Any] = []
        x = "x"
        if name == "mlp":
            for i, (a, b) in enumerate(((512, 1024), (1024, 1024))):
                x = _dense(nodes, inits, x, a, b, f"l{i}", rng)
                nodes.append(helper.make_node("Relu", [x], [f"r{i}"]))
                x = f"r{i}"
            x = _dense(nodes, inits, x, 1024, 10, "head", rng)
            out_shape: list[Any] = ["batch", 10]
        else:
            for i in range(4):
                h = _dense(nodes, inits, x, 768, 3072, f"up{i}", rng)
                nodes.append(helper.make_node("Relu", [h], [f"act{i}"]))
                h = _dense(nodes, inits, f"act{i}", 3072, 768, f"down{i}", rng)
                nodes.append(helper.make_node("Add", [x, h], [f"res{i}"]))
                x = f"res{i}"
            out_shape = ["batch", 32, 768]
        nodes.append(helper.make_node("Identity", [x], ["y"]))
        graph = helper.make_graph(
            nodes,
            name,
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", *shape])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
            inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        version = root / name / "1"
        version.mkdir(parents=True)
        onnx.save(model, str(version / "model.onnx"))
        out[name] = root / name
    return out


# ---- in process -------------------------------------------------------------------------------------------------


def in_process(model: Path, device: str, rows: int, seconds: float) -> float:
    """Mean seconds of one run of ``rows`` rows on ``device`` (servekit's provider choice)."""
    import onnxruntime as ort

    available = ort.get_available_providers()
    gpus = devices.machine_gpus()
    placement = devices.onnx_placement(DeviceRequest.parse(device), available, gpus)
    providers = devices.onnx_providers(placement, available, 0.0, gpus)
    session = ort.InferenceSession(
        str(model / "1" / "model.onnx"),
        providers=[p for p, _ in providers],
        provider_options=[o for _, o in providers],
    )
    x = np.random.default_rng(1).standard_normal((rows, *MODELS[model.name])).astype(np.float32)
    for _ in range(3):  # warm: kernels chosen, arena grown
        session.run(None, {"x": x})
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        session.run(None, {"x": x})
        n += 1
    return (time.perf_counter() - t0) / n


# ---- through servekit -------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, model: Path, log: Path, *flags: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        cmd = [sys.executable, "-m", "servekit.cli.main", "serve", "--host", "127.0.0.1"]
        cmd += ["--rest_api_port", str(self.port), "--model_base_path", str(model), *flags]
        with open(log, "wb") as f:
            self.proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"servekit serve exited: {self.log.read_text()[-2000:]}")
            try:
                if requests.get(self.url + "/v2/health/ready", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"servekit serve not ready after {timeout_s} s: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def load(url: str, name: str, clients: int, seconds: float) -> dict[str, float]:
    """``clients`` closed-loop clients, one row per request, for ``seconds``: rows/s and latency percentiles."""
    row = np.random.default_rng(2).standard_normal(MODELS[name]).astype(np.float32).tolist()
    body = json.dumps({"instances": [row]}).encode()
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    stop_at = time.perf_counter() + seconds

    def client() -> None:
        mine: list[float] = []
        with requests.Session() as s:
            while time.perf_counter() < stop_at:
                t0 = time.perf_counter()
                r = s.post(f"{url}/v1/models/{name}:predict", data=body, timeout=60)
                if r.status_code != 200:
                    with lock:
                        errors[0] += 1
                    continue
                mine.append(time.perf_counter() - t0)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    latencies.sort()
    pick = (lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000) if latencies else None
    return {
        "rows_per_s": len(latencies) / wall,
        "p50_ms": pick(0.5) if pick else float("nan"),
        "p99_ms": pick(0.99) if pick else float("nan"),
        "errors": errors[0],
    }


def through_servekit(model: Path, device: str, clients: int, seconds: float, logs: Path) -> dict[str, Any]:
    server = Server(
        model, logs / f"{model.name}-{device.replace(':', '')}.log", "--device", device, "--enable_batching"
    )
    try:
        server.wait_ready()
        placed = [line for line in server.log.read_text().splitlines() if " runs on " in line]
        result: dict[str, Any] = load(server.url, model.name, clients, seconds)
        result["placement"] = placed[-1].split(" runs on ", 1)[-1] if placed else "?"
        return result
    finally:
        server.stop()


def gpu_memory_by_pid() -> dict[int, int]:
    """MiB each process holds on the GPUs (``nvidia-smi --query-compute-apps``)."""
    if shutil.which("nvidia-smi") is None:
        return {}
    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    held: dict[int, int] = {}
    for line in out.splitlines():
        pid, _, mib = line.partition(",")
        if pid.strip().isdigit() and mib.strip().isdigit():
            held[int(pid)] = int(mib)
    return held


def shared_card(model: Path, logs: Path) -> dict[str, Any]:
    """Two servers on cuda:0 with --per_process_gpu_memory_fraction 0.4 each: both load and answer."""
    servers = [
        Server(model, logs / f"shared-{i}.log", "--device", "cuda:0", "--per_process_gpu_memory_fraction", "0.4")
        for i in range(2)
    ]
    try:
        for s in servers:
            s.wait_ready()
        answers = [load(s.url, model.name, 4, 2.0) for s in servers]
        held = gpu_memory_by_pid()
        card = devices.machine_gpus()[0].memory_bytes // 2**20
        return {
            "both_loaded": True,
            "errors": [a["errors"] for a in answers],
            "rows_per_s": [a["rows_per_s"] for a in answers],
            "gpu_mib_held": [held.get(s.proc.pid) for s in servers],
            "limit_mib_each": int(0.4 * card),
            "card_mib": card,
        }
    except RuntimeError as exc:
        return {"both_loaded": False, "error": str(exc)[-500:]}
    finally:
        for s in servers:
            s.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0, help="load per server and device")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON report here")
    args = parser.parse_args()
    import onnxruntime as ort

    gpus = devices.machine_gpus()
    cuda = devices.CUDA_PROVIDER in ort.get_available_providers()
    targets = ["cpu"] + (["cuda:0"] if gpus and cuda else [])
    report: dict[str, Any] = {
        "gpus": [f"{g.name} ({g.memory_bytes // 2**20} MiB)" for g in gpus],
        "onnxruntime_providers": ort.get_available_providers(),
        "cpus": os.cpu_count(),
        "models": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        logs = root / "logs"
        logs.mkdir()
        models = build_models(root / "models")
        for name, model in models.items():
            entry: dict[str, Any] = {}
            for device in targets:
                batch_64 = in_process(model, device, 64, args.seconds / 5)
                served = through_servekit(model, device, args.clients, args.seconds, logs)
                entry[device] = {
                    "in_process_ms_batch_1": 1000 * in_process(model, device, 1, args.seconds / 5),
                    "in_process_ms_batch_64": 1000 * batch_64,
                    "servekit": served,
                    # one-row requests through HTTP, JSON and batching against the bare runtime at batch 64
                    "servekit_over_in_process_rows_per_s": served["rows_per_s"] / (64 / batch_64),
                }
                print(name, device, json.dumps(entry[device]), flush=True)
            if "cuda:0" in entry:
                cpu, gpu = entry["cpu"], entry["cuda:0"]
                entry["gpu_over_cpu"] = {
                    "in_process_speedup_batch_64": cpu["in_process_ms_batch_64"] / gpu["in_process_ms_batch_64"],
                    "servekit_rows_per_s": gpu["servekit"]["rows_per_s"] / cpu["servekit"]["rows_per_s"],
                }
            report["models"][name] = entry
        if len(targets) > 1:
            report["shared_card_fraction_0_4"] = shared_card(models["mlp"], logs)
    text = json.dumps(report, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    if len(targets) == 1:
        why = "no GPU on this machine" if not gpus else f"onnxruntime here has no {devices.CUDA_PROVIDER}"
        print(f"gpu_bench: {why}: the GPU half (cuda:0, two processes sharing a card) was not run", flush=True)


if __name__ == "__main__":
    main()
