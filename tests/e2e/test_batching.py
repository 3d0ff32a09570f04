"""Dynamic batching against a real ``servekit serve --enable_batching`` process.

What is checked: concurrent one-row requests are merged into multi-row batches and every caller still gets
exactly its own row's answer; a full queue refuses at once with 503 instead of making callers wait; a
request whose deadline passes while it is queued gets 504 and never reaches the model; the server serves
normally afterwards.

The overload tests use a SageMaker handler model declared batchable by ``servekit.toml``. It can be held
busy by a *gate* file: while the file exists ``predict_fn`` waits (at most 20 s, so nothing can hang), which
makes "the model is busy" a state the test controls rather than a race against a sleep. Every model call
appends its row count to a ``calls`` file, so the tests can tell which requests reached the model.
"""

from __future__ import annotations

import json
import textwrap
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import requests
from numpy.testing import assert_allclose, assert_array_equal
from prometheus_client.parser import text_string_to_metric_families

from servekit.tools.demo.build import iris_onnx

pytestmark = pytest.mark.e2e

NO_POLL = ("--file_system_poll_wait_seconds", "0")
GATE_LIMIT_S = 20.0  # the longest the handler model waits for its gate to open

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


# ---- helpers ---------------------------------------------------------------------------------------------
def scrape(url: str) -> Samples:
    r = requests.get(f"{url}/metrics", timeout=10)
    assert r.status_code == 200, r.text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum over every sample of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def one(samples: Samples, name: str, **labels: str) -> float:
    """The value of the one sample of ``name`` with exactly these labels; it must exist."""
    key = (name, frozenset(labels.items()))
    assert key in samples, f"no sample {name}{labels}; have {sorted(n for n, _ in samples if n.startswith(name))}"
    return samples[key]


def request_counts(samples: Samples, model: str) -> dict[str, float]:
    name = ":tensorflow:serving:request_count"
    return {
        dict(ls)["status"]: v
        for (n, ls), v in samples.items()
        if n == name and dict(ls).get("model_name") == model and v
    }


def wait_until(what: str, done: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any
    seconds: float  # client-side latency


def post(url: str, doc: Mapping[str, Any], headers: Mapping[str, str] | None = None, session: Any = requests) -> Reply:
    t0 = time.monotonic()
    r = session.post(url, data=json.dumps(doc), headers=dict(headers or {}), timeout=30)
    seconds = time.monotonic() - t0
    try:
        body = r.json()
    except ValueError:
        body = r.text
    return Reply(r.status_code, body, seconds)


def write_batching(path: Path, **fields: int | list[int]) -> Path:
    """A --batching_parameters_file in TF Serving's BatchingParameters text format."""
    lines = []
    for key, value in fields.items():
        if isinstance(value, list):
            lines += [f"{key}: {v}" for v in value]  # a repeated field
        else:
            lines.append(f"{key} {{ value: {value} }}")  # a wrapped scalar, as TF Serving's docs write it
    path.write_text("\n".join(lines) + "\n")
    return path


# ---- 1. many concurrent one-row requests -----------------------------------------------------------------
def test_concurrent_one_row_requests_are_batched_with_unchanged_answers(
    server_factory: Callable[..., Any], tmp_path: Path
) -> None:
    version_dir = iris_onnx(tmp_path / "iris" / "1")
    params = write_batching(
        tmp_path / "batching.config",
        max_batch_size=32,
        batch_timeout_micros=5000,
        max_enqueued_batches=100,
        num_batch_threads=1,
        allowed_batch_sizes=[4, 8, 16, 32],
    )
    srv = server_factory(
        "--model_base_path",
        str(tmp_path / "iris"),
        "--model_name",
        "iris",
        "--enable_batching",
        "--batching_parameters_file",
        str(params),
        *NO_POLL,
    )

    n_clients, rounds = 40, 5
    n = n_clients * rounds
    # The unbatched answer for each row: the same graph run on that row alone. Rows are picked so their
    # answers differ far beyond the comparison tolerance: a row delivered to the wrong caller cannot pass.
    sess = ort.InferenceSession(str(version_dir / "model.onnx"), providers=["CPUExecutionProvider"])
    pool_rows = np.random.default_rng(7).uniform([4.0, 2.0, 1.0, 0.1], [8.0, 4.5, 7.0, 2.5], size=(4 * n, 4)).round(2)
    picked: list[int] = []
    ref_labels_l: list[int] = []
    ref_probs_l: list[np.ndarray[Any, Any]] = []
    for j in range(len(pool_rows)):
        label, probs = sess.run(["label", "probabilities"], {"X": pool_rows[j : j + 1].astype(np.float32)})
        if all(np.abs(probs[0] - p).max() > 1e-4 for p in ref_probs_l):
            picked.append(j)
            ref_labels_l.append(int(label[0]))
            ref_probs_l.append(probs[0])
            if len(picked) == n:
                break
    assert len(picked) == n
    rows, ref_labels, ref_probs = pool_rows[picked], np.asarray(ref_labels_l), np.asarray(ref_probs_l)

    srv.wait_ready()
    base = srv.url
    barrier = threading.Barrier(n_clients, timeout=30)

    def client(c: int) -> list[tuple[int, Reply]]:
        out = []
        with requests.Session() as s:
            for r in range(rounds):
                i = r * n_clients + c
                barrier.wait()  # each round, every client sends at the same moment
                if i % 2:
                    doc: dict[str, Any] = {
                        "inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32", "data": rows[i].tolist()}]
                    }
                    out.append((i, post(f"{base}/v2/models/iris/infer", doc, session=s)))
                else:
                    out.append(
                        (i, post(f"{base}/v1/models/iris:predict", {"instances": [rows[i].tolist()]}, session=s))
                    )
        return out

    with ThreadPoolExecutor(n_clients) as pool:
        futures = [pool.submit(client, c) for c in range(n_clients)]
        replies = [item for f in futures for item in f.result(timeout=60)]

    assert sorted(i for i, _ in replies) == list(range(n))
    for i, reply in replies:
        assert reply.status == 200, (i, reply)
        if i % 2:
            outputs = {o["name"]: o for o in reply.body["outputs"]}
            assert outputs["probabilities"]["shape"] == [1, 3]
            label, probs = outputs["label"]["data"][0], outputs["probabilities"]["data"]
        else:
            (pred,) = reply.body["predictions"]
            label, probs = pred["label"], pred["probabilities"]
        assert label == ref_labels[i], i
        # float32 results of a 1-row and an n-row GEMM may differ in the last bit; nothing more.
        assert_allclose(probs, ref_probs[i], rtol=1e-5, atol=1e-6, err_msg=f"row {i}")

    m = scrape(base)
    labels = {"model": "iris", "version": "1"}
    batches = total(m, "servekit_batch_size_count", **labels)
    assert total(m, "servekit_batch_size_sum", **labels) == n  # every row ran exactly once
    assert 0 < batches < n, "no request shared a batch with another"
    assert one(m, "servekit_batch_size_bucket", le="1.0", **labels) < batches
    assert one(m, "servekit_batch_size_bucket", le="32.0", **labels) == batches  # never above max_batch_size
    assert total(m, "servekit_batches_total", **labels) == batches
    # Executed (padded) sizes are allowed_batch_sizes only: none below 4, and padding is the difference.
    padded = total(m, ":tensorflow:serving:batching_session:processed_batch_size_sum", model_name="iris")
    assert one(m, ":tensorflow:serving:batching_session:processed_batch_size_bucket", le="2.0", model_name="iris") == 0
    assert total(m, ":tensorflow:serving:batching_session:processed_batch_size_count", model_name="iris") == batches
    assert padded >= 4 * batches
    assert total(m, ":tensorflow:serving:batching_session:padding_size_sum", model_name="iris") == padded - n
    assert request_counts(m, "iris") == {"OK": n}
    assert total(m, "servekit_queue_seconds_count", **labels) == n
    assert srv.proc.poll() is None, srv.log()


def test_a_request_alone_in_the_server_runs_as_its_own_batch_on_the_event_loop(
    server_factory: Callable[..., Any], tmp_path: Path
) -> None:
    """One client at a time: each request finds the server otherwise empty, so nothing could join its batch. A
    cheap model is measured on the batch thread first, then runs on the loop; every request still counts as an
    IDLE batch of one with the answer it had."""
    version_dir = iris_onnx(tmp_path / "iris" / "1")
    params = write_batching(tmp_path / "batching.config", max_batch_size=32, batch_timeout_micros=5000)
    srv = server_factory(
        *("--model_base_path", str(tmp_path / "iris"), "--model_name", "iris", "--enable_batching"),
        *("--batching_parameters_file", str(params), "--inline_run_limit_micros", "100000", *NO_POLL),
    )
    sess = ort.InferenceSession(str(version_dir / "model.onnx"), providers=["CPUExecutionProvider"])
    rows = np.random.default_rng(3).uniform([4.0, 2.0, 1.0, 0.1], [8.0, 4.5, 7.0, 2.5], size=(40, 4)).round(2)
    srv.wait_ready()
    with requests.Session() as s:
        for row in rows:
            reply = post(f"{srv.url}/v1/models/iris:predict", {"instances": [row.tolist()]}, session=s)
            assert reply.status == 200, reply
            label, probs = sess.run(["label", "probabilities"], {"X": row[None].astype(np.float32)})
            (pred,) = reply.body["predictions"]
            assert pred["label"] == int(label[0])
            assert_allclose(pred["probabilities"], probs[0], rtol=1e-5, atol=1e-6)
    assert "signature 'serving_default', requests of 4+ elements: run on the event loop" in srv.log()
    m = scrape(srv.url)
    labels = {"model": "iris", "version": "1"}
    assert one(m, "servekit_batches_total", reason="idle", **labels) == len(rows)  # thread or loop, one batch each
    assert total(m, "servekit_batch_size_sum", **labels) == total(m, "servekit_batch_size_count", **labels) == len(rows)


# ---- 2. overload, deadlines, recovery --------------------------------------------------------------------
HANDLER = textwrap.dedent(
    """
    import time
    from pathlib import Path

    import numpy as np

    CTL = Path({ctl!r})


    def model_fn(model_dir):
        return 2.0


    def predict_fn(data, model):
        rows = np.asarray(data, dtype=np.float64)
        with open(CTL / "calls", "a") as f:
            f.write(f"{{len(rows)}}\\n")
        deadline = time.monotonic() + {gate_limit!r}
        while (CTL / "gate").exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep({sleep!r})
        return rows * model
    """
).lstrip()

MANIFEST = textwrap.dedent(
    """
    [[signatures]]
    name = "serving_default"
    inputs = [{name = "inputs", datatype = "FP64", shape = [-1, 4]}]
    outputs = [{name = "predictions", datatype = "FP64", shape = [-1, 4]}]
    """
).lstrip()


@dataclass
class SlowModel:
    base: Path  # --model_base_path
    ctl: Path

    @property
    def gate(self) -> Path:
        return self.ctl / "gate"

    def calls(self) -> list[int]:
        path = self.ctl / "calls"
        return [int(x) for x in path.read_text().split()] if path.exists() else []


def slow_model(root: Path, sleep: float) -> SlowModel:
    base, ctl = root / "slow", root / "ctl"
    version = base / "1"
    (version / "code").mkdir(parents=True)
    ctl.mkdir()
    (version / "code" / "inference.py").write_text(HANDLER.format(ctl=str(ctl), gate_limit=GATE_LIMIT_S, sleep=sleep))
    (version / "servekit.toml").write_text(MANIFEST)
    return SlowModel(base, ctl)


def start_slow(
    server_factory: Callable[..., Any], tmp_path: Path, sleep: float, *extra: str, **batching: int
) -> tuple[Any, SlowModel]:
    model = slow_model(tmp_path, sleep)
    params = write_batching(tmp_path / "batching.config", **batching)
    srv = server_factory(
        "--model_base_path",
        str(model.base),
        "--model_name",
        "slow",
        "--batching_parameters_file",  # servekit turns batching on when a parameters file is given
        str(params),
        *NO_POLL,
        *extra,
    )
    srv.wait_ready()
    return srv, model


def row(i: int) -> list[float]:
    return [float(i), i + 0.25, i + 0.5, -float(i)]


def predict_url(srv: Any) -> str:
    return f"{srv.url}/v1/models/slow:predict"


def assert_doubled(reply: Reply, i: int) -> None:
    assert reply.status == 200, reply
    assert_array_equal(np.asarray(reply.body["predictions"]), np.asarray([row(i)]) * 2)


def assert_queue_full(reply: Reply) -> None:
    assert reply.status == 503, reply
    message = reply.body["error"]
    assert "queue" in message and "is full" in message, message


TINY_QUEUE = {"max_batch_size": 1, "max_enqueued_batches": 1, "num_batch_threads": 1, "batch_timeout_micros": 1000}


def test_overload_is_refused_fast_and_the_server_recovers(server_factory: Callable[..., Any], tmp_path: Path) -> None:
    """Many clients against a model that takes ``sleep`` per call and a queue of one row."""
    sleep = 1.0
    srv, model = start_slow(server_factory, tmp_path, sleep, **TINY_QUEUE)
    url = predict_url(srv)
    n_clients, per_client = 24, 3
    barrier = threading.Barrier(n_clients, timeout=30)

    def client(c: int) -> list[tuple[int, Reply]]:
        out = []
        with requests.Session() as s:
            barrier.wait()
            for k in range(per_client):
                i = c * per_client + k
                out.append((i, post(url, {"instances": [row(i)]}, session=s)))
        return out

    started = time.monotonic()
    with ThreadPoolExecutor(n_clients) as pool:
        futures = [pool.submit(client, c) for c in range(n_clients)]
        replies = [item for f in futures for item in f.result(timeout=90)]
    elapsed = time.monotonic() - started

    ok = [(i, r) for i, r in replies if r.status == 200]
    refused = [r for _, r in replies if r.status != 200]
    assert len(replies) == n_clients * per_client
    assert ok, "no request was served"
    assert refused, "a queue of one row never filled under 24 concurrent clients"
    for i, r in ok:
        assert_doubled(r, i)
    # The queue's own 503s, and, once the queue has been full, the overload gate's: it then lets in fewer than were
    # in (inference/overload.py) and refuses the rest as their heads are parsed, holding each such connection for
    # up to Retry-After (these clients do not wait it out: their next request is refused when read).
    queue_full = [r for r in refused if "overloaded" not in r.body["error"]]
    assert queue_full, "the queue's own refusal never reached a client"
    for r in queue_full:
        assert_queue_full(r)
        assert r.seconds < sleep, f"a refusal took {r.seconds:.3f}s, longer than one model call ({sleep}s)"
    for r in refused:
        assert r.status == 503, r
    # Only accepted requests reach the model (one row per call with max_batch_size 1), and none waited
    # for more than the work ahead of it: the run is bounded by the served calls, not by the clients.
    assert model.calls() == [1] * len(ok)
    assert elapsed < len(ok) * sleep + 20

    # Recovery: the queue drained; sequential requests are all served.
    for i in range(3):
        assert_doubled(post(url, {"instances": [row(100 + i)]}), 100 + i)
    counts = request_counts(scrape(srv.url), "slow")
    assert counts == {"OK": len(ok) + 3, "UNAVAILABLE": len(queue_full)}
    assert srv.proc.poll() is None, srv.log()


def test_full_queue_and_expired_deadline_while_the_model_is_held(
    server_factory: Callable[..., Any], tmp_path: Path
) -> None:
    srv, model = start_slow(server_factory, tmp_path, 0.0, **TINY_QUEUE)
    url = predict_url(srv)
    model.gate.touch()
    with ThreadPoolExecutor(24) as pool:
        try:
            held = pool.submit(post, url, {"instances": [row(1)]})
            wait_until("the first request to reach the model", lambda: model.calls() == [1])

            # A queued request whose deadline passes gets 504 while the model is still busy; TF REST and KServe.
            late = post(url, {"instances": [row(2)]}, {"x-servekit-timeout-ms": "50"})
            assert late.status == 504, late
            assert "timed out" in late.body["error"], late.body
            v2 = {"inputs": [{"name": "inputs", "shape": [1, 4], "datatype": "FP64", "data": row(3)}]}
            late_v2 = post(f"{srv.url}/v2/models/slow/infer", v2, {"x-servekit-timeout-ms": "50"})
            assert late_v2.status == 504, late_v2
            assert late.seconds < GATE_LIMIT_S / 4 and late_v2.seconds < GATE_LIMIT_S / 4
            assert not held.done(), "the model was to be busy throughout"

            # Twenty at once: one fits the queue (one row); the other 19 are refused without waiting: by the full
            # queue, and once it has refused one, also by the overload gate, which then lets in fewer than were in.
            barrier = threading.Barrier(20, timeout=30)

            def one(i: int) -> Reply:
                barrier.wait()
                return post(url, {"instances": [row(i)]})

            burst: list[Future[Reply]] = [pool.submit(one, 10 + i) for i in range(20)]
            wait_until("19 of 20 requests to be answered", lambda: sum(f.done() for f in burst) >= 19)
            done = [f.result() for f in burst if f.done()]
            waiting = [i for i, f in enumerate(burst) if not f.done()]
            assert len(done) == 19 and len(waiting) == 1, (len(done), waiting)
            queue_full = [r for r in done if "overloaded" not in r.body["error"]]
            assert queue_full, [r.body for r in done]
            for r in queue_full:
                assert_queue_full(r)
            for r in done:
                assert r.status == 503, r
                assert r.seconds < GATE_LIMIT_S / 4
            assert not held.done()
            assert model.calls() == [1], "expired or refused requests reached the model"
        finally:
            model.gate.unlink(missing_ok=True)
        assert_doubled(held.result(timeout=30), 1)
        assert_doubled(burst[waiting[0]].result(timeout=30), 10 + waiting[0])

    assert model.calls() == [1, 1]
    for i in range(5):  # recovered: plain sequential traffic is served
        assert_doubled(post(url, {"instances": [row(50 + i)]}), 50 + i)
    assert model.calls() == [1] * 7
    m = scrape(srv.url)
    assert request_counts(m, "slow") == {"OK": 7, "UNAVAILABLE": len(queue_full), "DEADLINE_EXCEEDED": 2}
    assert total(m, "servekit_overload_shed_total") == 19 - len(queue_full)  # the gate's, before any decoding
    assert total(m, "servekit_batch_size_count", model="slow") == 7
    assert srv.proc.poll() is None, srv.log()


def test_server_default_deadline_and_header_override(server_factory: Callable[..., Any], tmp_path: Path) -> None:
    srv, model = start_slow(server_factory, tmp_path, 0.0, "--request_timeout_ms", "100", **TINY_QUEUE)
    url = predict_url(srv)

    bad = post(url, {"instances": [row(0)]}, {"x-servekit-timeout-ms": "soon"})
    assert bad.status == 400 and "x-servekit-timeout-ms" in bad.body["error"], bad
    assert model.calls() == []

    model.gate.touch()
    probes: list[Reply] = []
    attempts: list[Reply] = []

    def queue_is_full() -> bool:
        probes.append(post(url, {"instances": [row(4)]}, {"x-servekit-timeout-ms": "1"}))
        return probes[-1].status == 503

    def patient() -> Reply:
        """Sent with a long header deadline; tried again if a probe held the one queue slot just then."""
        deadline = time.monotonic() + 10
        while True:
            attempts.append(post(url, {"instances": [row(2)]}, {"x-servekit-timeout-ms": "30000"}))
            if attempts[-1].status != 503 or time.monotonic() > deadline:
                return attempts[-1]

    with ThreadPoolExecutor(4) as pool:
        try:
            held = pool.submit(post, url, {"instances": [row(1)]})
            wait_until("the first request to reach the model", lambda: model.calls() == [1])
            # No header: the server's 100 ms default expires it in the queue.
            default = post(url, {"instances": [row(3)]})
            assert default.status == 504, default
            assert "timed out" in default.body["error"], default
            assert default.seconds < GATE_LIMIT_S / 4
            # With a header the request's own deadline replaces the default. A refused probe proves the
            # patient request holds the queue's one row (probes go one at a time; each either expired or
            # was refused).
            waiting = pool.submit(patient)
            wait_until("the patient request to be queued", queue_is_full)
            assert_queue_full(probes[-1])
            assert all(p.status == 504 for p in probes[:-1]), probes
            time.sleep(1.0)  # ten times the default deadline, not synchronisation
            assert not waiting.done() and not held.done()
        finally:
            model.gate.unlink(missing_ok=True)
        assert_doubled(held.result(timeout=30), 1)
        assert_doubled(waiting.result(timeout=30), 2)
    for refused in attempts[:-1]:
        assert_queue_full(refused)
    assert model.calls() == [1, 1]
    counts = request_counts(scrape(srv.url), "slow")
    assert counts == {
        "OK": 2,
        "DEADLINE_EXCEEDED": len(probes),  # the default-deadline request and every probe but the last
        "UNAVAILABLE": len(attempts),  # the last probe and every patient attempt but the last
        "INVALID_ARGUMENT": 1,
    }


# ---- configuration end to end ----------------------------------------------------------------------------
def test_per_model_batching_from_a_yaml_model_config(server_factory: Callable[..., Any], tmp_path: Path) -> None:
    """No --enable_batching: only the model whose config has a ``batching`` block goes through a queue."""
    iris_onnx(tmp_path / "iris" / "1")
    config = tmp_path / "models.yaml"
    config.write_text(
        "model_config_list:\n"
        "  - name: batched\n"
        "    base_path: iris\n"
        "    batching: {max_batch_size: 16, batch_timeout_micros: 2000, allowed_batch_sizes: [8, 16]}\n"
        "  - name: direct\n"
        "    base_path: iris\n"
    )
    srv = server_factory("--model_config_file", str(config), *NO_POLL)
    srv.wait_ready()
    for model in ("batched", "direct"):
        for _ in range(3):
            r = requests.post(
                f"{srv.url}/v1/models/{model}:predict", json={"instances": [[5.9, 3.0, 4.2, 1.5]]}, timeout=10
            )
            assert r.status_code == 200, r.text
    m = scrape(srv.url)
    assert one(m, "servekit_batch_size_count", model="batched", version="1") == 3
    assert one(m, "servekit_batch_size_sum", model="batched", version="1") == 3
    # each one-row batch was padded to the smallest allowed size, 8
    assert one(m, ":tensorflow:serving:batching_session:processed_batch_size_sum", model_name="batched") == 24
    assert total(m, "servekit_batch_size_count", model="direct") == 0
    assert not [k for k in m if dict(k[1]).get("model") == "direct" and k[0].startswith("servekit_batch")]
    assert request_counts(m, "batched") == {"OK": 3} and request_counts(m, "direct") == {"OK": 3}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("max_batch_size { value: 0 }\n", "max_batch_size must be >= 1"),
        (
            "max_batch_size { value: 8 }\nbatch_timeout { value: 5 }\n",
            "unknown batching parameter(s) ['batch_timeout']",
        ),
    ],
    ids=["zero max_batch_size", "unknown field"],
)
def test_a_bad_batching_parameters_file_stops_the_server_at_start(
    server_factory: Callable[..., Any], tmp_path: Path, text: str, fragment: str
) -> None:
    iris_onnx(tmp_path / "iris" / "1")
    params = tmp_path / "batching.config"
    params.write_text(text)
    srv = server_factory(
        "--model_base_path", str(tmp_path / "iris"), "--enable_batching", "--batching_parameters_file", str(params)
    )
    assert srv.proc.wait(timeout=60) == 2
    log = srv.log()
    assert f"servekit: {params}: " in log and fragment in log, log
    assert "Traceback" not in log, log
