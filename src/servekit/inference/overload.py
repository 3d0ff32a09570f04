"""Admission under overload: how many inference requests a server process lets in at once, adapted to how long
admitted requests wait (their server time less their model time), CoDel-style.

A request is decided when it arrives, before its body is read or decoded: past the limit it is answered 503 at
once, so under overload the process spends its CPU on requests it will answer. Queue length alone cannot set the
limit (the right length depends on the model's cost and the machine); queue time can: CoDel's observation is
that a standing queue shows as a *minimum* wait above the target over a whole interval, while a burst that
drains does not. So, once per ``interval``:

- the least wait of the requests answered in it is above ``target``: the queue stands; the limit shrinks in
  proportion (``target / least wait``, at most halving at once), never under ``min_limit``;
- otherwise, when at least half of it was in use during the interval (else it is not what holds requests
  back, and growing it means nothing), it grows by about its square root (Netflix concurrency-limits' queue
  allowance), up to ``max_limit``, its start.

The class is a pure decision: the caller passes the clock's readings in.
"""

from __future__ import annotations

import math

from servekit.config.models import OverloadConfig


class OverloadGate:
    __slots__ = (
        "_cfg",
        "_ends",
        "_least",
        "_peak",
        "_samples",
        "in_flight",
        "limit",
        "shed",
    )

    def __init__(self, cfg: OverloadConfig, now: float) -> None:
        self._cfg = cfg
        self.limit = float(cfg.max_limit)
        self.in_flight = 0
        self.shed = 0  # requests refused, since start
        self._ends = now + cfg.interval_ms / 1e3
        self._least = math.inf  # least wait of the requests answered in this interval
        self._samples = 0  # answered requests that said how long they waited
        self._peak = 0  # most requests in at once in this interval (a refusal counts as one more than the limit)

    def admit(self) -> bool:
        """Whether a request arriving now may enter; if so it holds a place until :meth:`leave`."""
        n = self.in_flight + 1
        if n > self._peak:
            self._peak = n
        if n > self.limit:
            self.shed += 1
            return False
        self.in_flight = n
        return True

    def leave(self, now: float, waited_s: float | None) -> None:
        """An admitted request is answered: ``waited_s`` how long it waited (the caller's measure: server time less
        model time), None when it says nothing about waiting (an error)."""
        self.in_flight -= 1
        if waited_s is not None:
            self._samples += 1
            if waited_s < self._least:
                self._least = waited_s
        if now >= self._ends:
            self._adjust(now)

    def _adjust(self, now: float) -> None:
        cfg = self._cfg
        target = cfg.target_ms / 1e3
        least = self._least
        if self._samples and least > target:  # a standing queue
            self.limit = max(float(cfg.min_limit), self.limit * max(0.5, target / least))
        elif self._samples and self._peak >= self.limit / 2:  # the limit is in use: more might be let in
            self.limit = min(float(cfg.max_limit), self.limit + max(1.0, math.sqrt(self.limit)))
        self._least = math.inf
        self._samples = 0
        self._peak = self.in_flight
        self._ends = now + cfg.interval_ms / 1e3
