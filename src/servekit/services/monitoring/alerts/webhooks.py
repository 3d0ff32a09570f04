"""Alert delivery: every alert is logged, then POSTed as JSON to each webhook from a background thread.

``send`` never blocks: it appends the alert to the log and puts it on a bounded queue (a full queue drops
the alert and logs the drop). The thread retries each URL up to ``attempts`` times with exponential backoff
(``backoff · 2^(attempt-1)``) on a connection error, a timeout or a non-2xx answer, and logs every outcome.
``close`` waits (bounded) for the queue to drain. The sleep between attempts is injected, so tests wait for
nothing.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from servekit.services.monitoring.config import WebhookConfig

log = logging.getLogger(__name__)

Post = Callable[[str, bytes, float], int]  # (url, body, timeout) -> HTTP status


def post_json(url: str, body: bytes, timeout: float) -> int:
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "application/json", "User-Agent": "servekit-monitor"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status: int = response.status
            return status
    except urllib.error.HTTPError as exc:
        return exc.code


@dataclass(slots=True)
class Delivery:
    delivered: int = 0
    failed: int = 0
    dropped: int = 0


class AlertLog:
    """JSON lines: one per alert and one per delivery attempt; safe to call from several threads."""

    def __init__(self, path: Path | None, clock: Callable[[], float] = time.time) -> None:
        self._path = path
        self._clock = clock
        self._lock = threading.Lock()

    def write(self, event: str, **fields: Any) -> None:
        line = orjson.dumps({"time": self._clock(), "event": event, **fields}) + b"\n"
        if self._path is None:
            return
        with self._lock:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            with self._path.open("ab") as f:
                f.write(line)


class Notifier:
    def __init__(
        self,
        cfg: WebhookConfig,
        alert_log: AlertLog,
        *,
        post: Post = post_json,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._cfg = cfg
        self._log = alert_log
        self._post = post
        self._sleep = sleep
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(maxsize=cfg.queue_size)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.delivery = Delivery()

    def send(self, alert: dict[str, Any]) -> None:
        log.warning("drift alarm: %s", alert.get("summary", alert))
        self._log.write("alert", alert=alert)
        if not self._cfg.urls:
            return
        self._start()
        try:
            self._queue.put_nowait(alert)
        except queue.Full:
            self.delivery.dropped += 1
            self._log.write("dropped", alert=alert, reason="webhook queue full")

    def close(self, timeout: float = 30.0) -> Delivery:
        """Let queued alerts go out, waiting at most ``timeout`` seconds; undelivered ones stay logged."""
        thread = self._thread
        if thread is not None:
            try:
                self._queue.put(None, timeout=timeout)
            except queue.Full:
                pass
            thread.join(timeout)
        return self.delivery

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="servekit-monitor-webhooks", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while (alert := self._queue.get()) is not None:
            body = orjson.dumps(alert)
            for url in self._cfg.urls:
                self._deliver(url, body, alert)

    def _deliver(self, url: str, body: bytes, alert: dict[str, Any]) -> None:
        for attempt in range(1, self._cfg.attempts + 1):
            try:
                status = self._post(url, body, self._cfg.timeout_seconds)
                error = None if 200 <= status < 300 else f"HTTP {status}"
            except (OSError, ValueError) as exc:  # URLError, timeouts and refused connections are OSErrors
                status, error = 0, f"{type(exc).__name__}: {exc}"
            if error is None:
                self.delivery.delivered += 1
                self._log.write("delivered", url=url, attempt=attempt, status=status, alert_id=alert.get("id"))
                return
            self._log.write("delivery_failed", url=url, attempt=attempt, error=error, alert_id=alert.get("id"))
            if attempt < self._cfg.attempts:
                self._sleep(self._cfg.backoff_seconds * 2 ** (attempt - 1))
        self.delivery.failed += 1
        log.error("webhook %s: alert %s not delivered after %d attempts", url, alert.get("id"), self._cfg.attempts)
