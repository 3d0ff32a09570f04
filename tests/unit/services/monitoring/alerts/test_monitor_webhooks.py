"""Alert delivery to a real HTTP server on 127.0.0.1: retries, backoff, the delivery log; and the watch loop."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest

from servekit.services.monitoring.alerts.webhooks import AlertLog, Notifier
from servekit.services.monitoring.config import WebhookConfig


class Hook:
    """Answers 500 to the first ``failures`` POSTs, then 204; records every body."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.bodies: list[Any] = []
        self.lock = threading.Lock()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with hook.lock:
                    hook.bodies.append((self.headers["Content-Type"], orjson.loads(body)))
                    fail = len(hook.bodies) <= hook.failures
                self.send_response(500 if fail else 204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook() -> Iterator[Hook]:
    h = Hook(failures=2)
    yield h
    h.close()


def _events(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def test_delivery_retries_with_backoff_until_the_hook_accepts(hook: Hook, tmp_path: Path) -> None:
    waits: list[float] = []
    log = tmp_path / "alerts.jsonl"
    cfg = WebhookConfig(urls=(hook.url,), attempts=4, backoff_seconds=0.5)
    notifier = Notifier(cfg, AlertLog(log), sleep=waits.append)
    alert = {"id": "a1", "feature": "x", "metric": "ks_statistic", "value": 0.4, "threshold": 0.1}
    notifier.send(alert)  # returns at once; delivery happens on the notifier's thread
    delivery = notifier.close(timeout=30)
    assert (delivery.delivered, delivery.failed, delivery.dropped) == (1, 0, 0)
    assert hook.bodies == [("application/json", alert)] * 3
    assert waits == [0.5, 1.0]
    events = _events(log)
    assert [e["event"] for e in events] == ["alert", "delivery_failed", "delivery_failed", "delivered"]
    assert events[1]["error"] == "HTTP 500" and events[3]["attempt"] == 3 and events[3]["status"] == 204


def test_gives_up_after_the_last_attempt(tmp_path: Path) -> None:
    dead = Hook(failures=0)
    url = dead.url
    dead.close()  # nothing listens there any more: connection refused
    notifier = Notifier(WebhookConfig(urls=(url,), attempts=3), AlertLog(tmp_path / "a.jsonl"), sleep=lambda s: None)
    notifier.send({"id": "a2"})
    delivery = notifier.close(timeout=30)
    assert (delivery.delivered, delivery.failed) == (0, 1)
    assert [e["event"] for e in _events(tmp_path / "a.jsonl")] == ["alert"] + ["delivery_failed"] * 3


def test_send_never_blocks_a_full_queue_drops_and_logs(tmp_path: Path) -> None:
    release = threading.Event()
    started = threading.Event()

    def slow_post(url: str, body: bytes, timeout: float) -> int:
        started.set()
        release.wait(30)
        return 200

    cfg = WebhookConfig(urls=("http://127.0.0.1:9/",), queue_size=1)
    notifier = Notifier(cfg, AlertLog(tmp_path / "a.jsonl"), post=slow_post, sleep=lambda s: None)
    notifier.send({"id": 1})
    assert started.wait(30)  # the first alert is being delivered, the thread is busy
    notifier.send({"id": 2})  # queued
    notifier.send({"id": 3})  # queue full: dropped at once, not waited for
    assert notifier.delivery.dropped == 1
    release.set()
    assert notifier.close(timeout=30).delivered == 2
    assert "dropped" in [e["event"] for e in _events(tmp_path / "a.jsonl")]


def test_without_urls_alerts_are_only_logged(tmp_path: Path) -> None:
    notifier = Notifier(WebhookConfig(), AlertLog(tmp_path / "a.jsonl"))
    notifier.send({"id": 1})
    assert notifier.close().delivered == 0
    assert [e["event"] for e in _events(tmp_path / "a.jsonl")] == ["alert"]
