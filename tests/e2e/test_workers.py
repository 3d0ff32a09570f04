"""``servekit serve --workers 2``: two processes on one socket, a dead worker replaced, metrics summed.

Which worker answered a request is not visible in the response, so the test reads what the server already
leaves behind: the supervisor's child processes (``/proc/<pid>/stat``, spawn workers being the children whose
command line runs ``multiprocessing.spawn``) and each worker's own Prometheus multiprocess file
(``counter_<pid>.db`` in the metrics directory the supervisor creates under ``$TMPDIR``).
"""

from __future__ import annotations

import json
import os
import signal
import textwrap
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.e2e

CLIENTS = 4
HANDLER = textwrap.dedent(
    """
    import time

    import numpy as np


    def model_fn(model_dir):
        time.sleep(1.0)  # a slow load: a replacement worker must not take traffic before it is done
        return 3.0


    def predict_fn(data, model):
        return np.asarray(data, dtype=np.float64) * model
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


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of a process, None once it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw.rsplit(")", 1)[1].split()  # the command name in parentheses may hold spaces
    return fields[0], int(fields[1])


def worker_pids(supervisor: int) -> set[int]:
    """Live spawn children of the supervisor (not its multiprocessing resource tracker, not zombies)."""
    pids = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = _stat(int(entry))
        if stat is None or stat[1] != supervisor or stat[0] == "Z":
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if b"multiprocessing.spawn" in cmdline:
            pids.add(int(entry))
    return pids


def per_worker(metrics_dir: Path, pid: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """One worker's own samples, read from its multiprocess files."""
    files = [str(p) for p in metrics_dir.glob(f"*_{pid}.db")]
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for metric in MultiProcessCollector.merge(files, accumulate=True)
        for s in metric.samples
    }


def ok_count(metrics_dir: Path, pid: int) -> float:
    samples = per_worker(metrics_dir, pid)
    return sum(v for (n, ls), v in samples.items() if n == "servekit_requests_total" and dict(ls).get("status") == "OK")


def available(metrics_dir: Path, pid: int) -> bool:
    key = ("servekit_servable_state", frozenset({"model": "m", "version": "1", "state": "AVAILABLE"}.items()))
    return per_worker(metrics_dir, pid).get(key) == 1.0


def wait_until(what: str, done: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@dataclass(frozen=True)
class Record:
    status: int  # -1: no HTTP response
    i: int
    at: float
    detail: str


class Clients:
    """CLIENTS threads sending one-row requests back to back, each on a fresh connection (so the kernel
    hands every request to whichever worker accepts first), until stopped or a deadline."""

    def __init__(self, url: str, max_seconds: float = 60.0) -> None:
        self.url = url
        self.records: list[Record] = []
        self._lock = threading.Lock()
        self._n = 0
        self._stop = threading.Event()
        self._deadline = time.monotonic() + max_seconds
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(CLIENTS)]

    def _next(self) -> int:
        with self._lock:
            self._n += 1
            return self._n

    def _run(self) -> None:
        while not self._stop.is_set() and time.monotonic() < self._deadline:
            i = self._next()
            doc = {"instances": [[i, 1.0, 2.0, -0.5]]}
            try:
                r = requests.post(self.url, data=json.dumps(doc), headers={"Connection": "close"}, timeout=10)
            except requests.RequestException as exc:
                self.records.append(Record(-1, i, time.monotonic(), repr(exc)))
                continue
            if r.status_code == 200 and r.json() != {"predictions": [[3.0 * i, 3.0, 6.0, -1.5]]}:
                self.records.append(Record(-2, i, time.monotonic(), f"wrong answer {r.text}"))
                continue
            self.records.append(Record(r.status_code, i, time.monotonic(), "" if r.status_code == 200 else r.text))

    def __enter__(self) -> Clients:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> list[Record]:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=15)
        assert not any(t.is_alive() for t in self._threads), "a client thread did not stop"
        return list(self.records)

    def wait(self, what: str, done: Callable[[], bool], timeout: float = 30.0) -> None:
        def check() -> bool:
            assert all(t.is_alive() for t in self._threads), f"a client thread ended early waiting for {what}"
            return done()

        wait_until(what, check, timeout)

    def wait_more(self, n: int) -> None:
        target = len(self.records) + n
        self.wait(f"{n} more responses", lambda: len(self.records) >= target)


def test_two_workers_survive_a_killed_worker_and_share_metrics(
    server_factory: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    version = tmp_path / "m" / "1"
    (version / "code").mkdir(parents=True)
    (version / "code" / "inference.py").write_text(HANDLER)
    (version / "servekit.toml").write_text(MANIFEST)
    server_tmp = tmp_path / "server-tmp"
    server_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(server_tmp))  # the supervisor's metrics directory lands here

    srv = server_factory(
        "--model_base_path",
        str(tmp_path / "m"),
        "--model_name",
        "m",
        "--workers",
        "2",
        "--file_system_poll_wait_seconds",
        "0",
    )
    srv.wait_ready(timeout=60)
    wait_until("two workers", lambda: len(worker_pids(srv.proc.pid)) == 2)
    first = worker_pids(srv.proc.pid)
    (metrics_dir,) = server_tmp.glob("servekit-metrics-*")
    wait_until("both workers to have loaded the model", lambda: all(available(metrics_dir, p) for p in first))

    url = f"{srv.url}/v1/models/m:predict"
    with Clients(url) as clients:
        # Both workers answer requests.
        clients.wait("requests served by each worker", lambda: all(ok_count(metrics_dir, p) >= 3 for p in first))

        victim = min(first)
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        clients.wait(
            "a replacement worker",
            lambda: victim not in worker_pids(srv.proc.pid) and len(worker_pids(srv.proc.pid)) == 2,
        )
        (replacement,) = worker_pids(srv.proc.pid) - first
        # The replacement loads (one second) before it takes connections, then serves its share.
        clients.wait("the replacement to serve requests", lambda: ok_count(metrics_dir, replacement) >= 3)
        clients.wait_more(40)
        records = clients.stop()

    failures = [r for r in records if r.status != 200]
    # Only requests in flight on the killed worker may fail, and only by losing the connection: no 503 from
    # a worker that was still loading, no wrong answers, at most one per client.
    assert len(failures) <= CLIENTS, failures
    assert all(r.status == -1 and r.at >= killed_at for r in failures), failures
    assert all(r.status == 200 for r in records[-40:])
    assert srv.proc.poll() is None, srv.log()
    assert worker_pids(srv.proc.pid) == (first - {victim}) | {replacement}

    # /metrics sums every worker, the dead one included; each scrape is answered by one worker, on a fresh
    # connection, and each must show the same total.
    served = sum(1 for r in records if r.status == 200)
    per_pid = {pid: ok_count(metrics_dir, pid) for pid in first | {replacement}}
    assert per_pid[victim] >= 3 and per_pid[replacement] >= 3, per_pid
    totals = []
    for _ in range(6):
        r = requests.get(f"{srv.url}/metrics", headers={"Connection": "close"}, timeout=10)
        assert r.status_code == 200, r.text
        totals.append(
            sum(
                s.value
                for family in text_string_to_metric_families(r.text)
                for s in family.samples
                if s.name == ":tensorflow:serving:request_count" and s.labels == {"model_name": "m", "status": "OK"}
            )
        )
    # The killed worker may have counted a request whose answer it never sent.
    assert all(served <= t <= served + len(failures) for t in totals), (served, len(failures), totals)
    assert totals == [sum(per_pid.values())] * len(totals), (totals, per_pid)

    # A signal stops the supervisor and its workers cleanly, and the shared metrics directory goes with them.
    srv.stop()
    assert srv.proc.returncode == 0, srv.log()
    assert not metrics_dir.exists()
    log = srv.log()
    assert f"worker {victim} exited with -9; replacing it in" in log, log
    assert "Traceback" not in log, log
