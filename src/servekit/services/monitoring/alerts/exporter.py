"""``monitor watch --metrics-port``: the watch's latest verdict as a live Prometheus endpoint.

``GET /metrics`` answers the newest run's ``metrics.prom`` (the per-feature metrics, thresholds and drift flags of its
latest judged window, docs/monitoring.md §6) followed by the watch's own series:

- ``servekit_monitor_watch_runs_total{outcome="ok"|"failed"}``: scheduled runs (one with no new window is ``ok``);
- ``servekit_monitor_watch_last_run_timestamp_seconds``, ``servekit_monitor_watch_last_success_timestamp_seconds``.

The newest run is the ``<out>/<window end>/metrics.prom`` last written, so a restarted watch serves the previous
process's verdict until its own first run. The server runs on a daemon thread; runs never wait for a scrape.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

log = logging.getLogger(__name__)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def newest_prom(out: Path) -> bytes:
    """The ``metrics.prom`` of the newest run folder under ``out`` (empty when there is none yet)."""
    found = [(p.stat().st_mtime_ns, p) for p in out.glob("*/metrics.prom") if p.is_file()]
    if not found:
        return b""
    try:
        return max(found)[1].read_bytes()
    except OSError:  # replaced between the listing and the read: the next scrape sees the new one
        return b""


class WatchExporter:
    def __init__(self, out: Path, host: str, port: int, clock: Callable[[], float] = time.time) -> None:
        self._out = out
        self._clock = clock
        self._lock = threading.Lock()
        self._registry = CollectorRegistry()
        self._runs = Counter(
            "servekit_monitor_watch_runs", "Scheduled runs of monitor watch by outcome.", ["outcome"],
            registry=self._registry,
        )  # fmt: skip
        self._last_run = Gauge(
            "servekit_monitor_watch_last_run_timestamp_seconds", "When the latest run ended.", registry=self._registry
        )
        self._last_ok = Gauge(
            "servekit_monitor_watch_last_success_timestamp_seconds",
            "When the latest successful run ended.",
            registry=self._registry,
        )
        for outcome in ("ok", "failed"):
            self._runs.labels(outcome)
        self._verdict = newest_prom(out)
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] not in ("/metrics", "/"):
                    self.send_error(404, "only /metrics is served")
                    return
                body = exporter.render()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:  # scrapes are not worth a log line each
                pass

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="monitor-exporter", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()
        host = self._server.server_address[0]
        log.info("monitor watch: Prometheus metrics on http://%s:%d/metrics", host, self.port)

    def record_run(self, ok: bool) -> None:
        """After each scheduled run: count it and pick up the newest verdict."""
        verdict = newest_prom(self._out)
        now = self._clock()
        with self._lock:
            self._runs.labels("ok" if ok else "failed").inc()
            self._last_run.set(now)
            if ok:
                self._last_ok.set(now)
            if verdict:
                self._verdict = verdict

    def render(self) -> bytes:
        with self._lock:
            return self._verdict + generate_latest(self._registry)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
