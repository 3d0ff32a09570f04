"""The gateway's side of a serverless variant (ServerlessConfig): how many requests it is serving now, the
MaxConcurrency past which a request is refused at once (ThrottlingException, 429, never queued), and the hooks
hosting gives it to start capacity: ``warm`` when the variant has no instance (a cold start the request waits
for), ``grow`` when more requests are in flight than it has instances (started in the background; requests keep
going to the instances there are)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field


@dataclass(eq=False)
class ServerlessGate:
    max_concurrency: int
    warm: Callable[[], Awaitable[None]]
    grow: Callable[[int], None]
    clock: Callable[[], float] = time.monotonic
    in_flight: int = 0
    last_used: float = field(default=0.0)

    def admit(self) -> bool:
        """Take a request if fewer than MaxConcurrency are in flight (False: refuse it now)."""
        if self.in_flight >= self.max_concurrency:
            return False
        self.in_flight += 1
        self.last_used = self.clock()
        return True

    def done(self) -> None:
        self.in_flight -= 1
        self.last_used = self.clock()

    def idle_for(self) -> float:
        """Seconds since the last request ended (0 while any is in flight)."""
        return 0.0 if self.in_flight else self.clock() - self.last_used


class ColdVariant(Exception):
    """The variant chosen has no instance yet, but can start one (a serverless variant at zero)."""

    def __init__(self, gate: ServerlessGate) -> None:
        super().__init__("cold start")
        self.gate = gate
