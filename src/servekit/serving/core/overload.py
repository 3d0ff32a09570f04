"""Admission under overload: how many inference requests a server process lets in at once, adapted to how long
admitted requests wait (their server time less their model time), CoDel-style.

A request is decided when it arrives, before its body is read or decoded: past the limit it is answered 503 at
once, so under overload the process spends its CPU on requests it will answer. Queue length alone cannot set the
limit (the right length depends on the model's cost and the machine); queue time can: CoDel's observation is
that a standing queue shows as a *minimum* wait above the target over a whole interval, while a burst that
drains does not. So, once per ``interval``:

- the least wait of the requests answered in it is above ``target``: the queue stands; the limit shrinks in
  proportion (``target / least wait``, at most halving at once), never under ``min_limit``;
- or the limit was full in it and nine in ten of its waits were above ``target``: the queue stands too, though some
  request found it briefly drained. Under a steady overload the least wait is a poor witness: refused clients
  come back spread out, and a wait is measured as server time less a few model runs, which CPU contention
  inflates, so one request in each interval reads as not having waited (measured: two workers on 2 cores sat at
  a limit of 64 each, 85-95% of waits over the target and the least near 0, putting 4x the c=32 concurrency in).
  The limit shrinks by ``target / mean wait``, at least a tenth and at most half;
- otherwise, when the limit refused requests in the interval and most of its waits were under the target, it
  grows: by about its square root (Netflix concurrency-limits' queue allowance) when none reached the target, else
  by one, up to ``max_limit``; and at once up to what the interval's answer rate fits in the target (Little's
  law: that many in wait about the target), at most doubling, so a fast model is not held at a small limit for
  long. A limit that refused nobody does not grow: growing it says nothing, and a limit that grew unused lets a
  whole jump in load in at once (measured: c=32 straight to c=400 let 400 in and put 0.6 s into the waits);
- when under half of it was in use, it falls toward twice what was (at most halving at once), never under
  ``burst_limit`` (what a quiet server takes at once before the limit has to grow) nor under what the answer rate
  brings in ``burst_ms`` (a burst's headroom: kept apart from the target, so a tight target does not refuse more
  of a jump from idle).

And at once, when a bounded queue behind the gate refuses a request as full (the batch queue, the model threads'
wait): the limit falls under the number of requests in at that moment, which the queue has shown is too many.

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
        "_over",
        "_peak",
        "_refused",
        "_samples",
        "_sum",
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
        self._sum = 0.0  # the sum of their waits
        self._over = 0  # of which waited longer than the target
        self._peak = 0  # most requests in at once in this interval
        self._refused = 0  # requests the limit refused in this interval

    def admit(self) -> bool:
        """Whether a request arriving now may enter; if so it holds a place until :meth:`leave`."""
        n = self.in_flight + 1
        if n > self.limit:
            self.shed += 1
            self._refused += 1
            return False
        if n > self._peak:
            self._peak = n
        self.in_flight = n
        return True

    def leave(self, now: float, waited_s: float | None, full: bool = False) -> None:
        """An admitted request is answered: ``waited_s`` how long it waited (the caller's measure: server time less
        model time), None when it says nothing about waiting (an error). ``full``: a bounded queue behind the gate
        refused it as full, so as many as are in now (this one included) are too many."""
        if full:
            self.limit = max(float(self._cfg.min_limit), min(self.limit, float(self.in_flight - 1)))
        self.in_flight -= 1
        if waited_s is not None:
            self._samples += 1
            self._sum += waited_s
            if waited_s < self._least:
                self._least = waited_s
            if waited_s * 1e3 > self._cfg.target_ms:
                self._over += 1
        if now >= self._ends:
            self._adjust(now)

    def _adjust(self, now: float) -> None:
        cfg = self._cfg
        target = cfg.target_ms / 1e3
        least, samples, peak = self._least, self._samples, self._peak
        # Little's law: as many as the answers of this interval came at, in the target's time, wait no longer than it
        rate = samples / max(now - self._ends + cfg.interval_ms / 1e3, 1e-9)
        fits = rate * target
        if samples and least > target:  # a standing queue
            self.limit = max(float(cfg.min_limit), self.limit * max(0.5, target / least))
        elif samples and peak + 1 > self.limit and 10 * self._over >= 9 * samples:  # standing, drained at moments
            shrink = max(0.5, min(0.9, target * samples / self._sum))  # > 0: nine in ten waits > target > 0
            self.limit = max(float(cfg.min_limit), self.limit * shrink)
        elif samples and self._refused and 2 * self._over < samples:
            step = max(1.0, math.sqrt(self.limit)) if self._over == 0 else 1.0
            grown = max(self.limit + step, min(2 * self.limit, fits))
            self.limit = min(float(cfg.max_limit), grown)
        elif 2 * peak < self.limit:
            headroom = rate * cfg.burst_ms / 1e3
            floor = min(float(cfg.max_limit), max(float(cfg.burst_limit), float(cfg.min_limit), headroom))
            self.limit = min(self.limit, max(floor, 2.0 * peak, self.limit / 2))
        self._least = math.inf
        self._sum = 0.0
        self._samples = self._over = self._refused = 0
        self._peak = self.in_flight
        self._ends = now + cfg.interval_ms / 1e3
