"""The overload gate on a manual clock: a limit that shrinks while the least wait of an interval stays over the
target, grows back while it is under and the limit is what holds requests back, and refuses past it."""

from __future__ import annotations

import math

import pytest

from servekit.config.models import OverloadConfig
from servekit.errors import ConfigError
from servekit.inference.overload import OverloadGate

CFG = OverloadConfig(target_ms=50.0, interval_ms=100.0, min_limit=4, max_limit=64)


def fill(gate: OverloadGate) -> int:
    """Admit until refused; how many got in."""
    n = 0
    while gate.admit():
        n += 1
    return n


def test_it_admits_up_to_its_limit_and_refuses_past_it() -> None:
    gate = OverloadGate(CFG, now=0.0)
    assert fill(gate) == 64
    assert gate.shed == 1
    gate.leave(0.01, 0.001)
    assert gate.admit()  # a place freed
    assert not gate.admit()


def test_a_standing_wait_over_the_target_shrinks_the_limit_in_proportion() -> None:
    gate = OverloadGate(CFG, now=0.0)
    fill(gate)
    gate.leave(0.05, 0.200)  # mid-interval: nothing decided yet
    assert gate.limit == 64
    gate.leave(0.10, 0.100)  # the interval ends; its least wait is 100 ms, twice the target
    assert gate.limit == 32
    gate.leave(0.15, 0.400)
    gate.leave(0.21, 0.400)  # 8x the target: at most halved at once
    assert gate.limit == 16


def test_one_short_wait_in_an_interval_means_no_standing_queue() -> None:
    gate = OverloadGate(CFG, now=0.0)
    fill(gate)
    gate.leave(0.03, 0.300)
    gate.leave(0.06, 0.010)  # the queue drained once in this interval: a burst, not overload
    gate.leave(0.10, 0.300)
    assert gate.limit == 64


def test_the_limit_never_falls_under_min_limit() -> None:
    gate = OverloadGate(CFG, now=0.0)
    for i in range(1, 30):
        fill(gate)
        gate.leave(i * 0.1, 10.0)
    assert gate.limit == 4
    while gate.in_flight:
        gate.leave(3.05, None)
    assert fill(gate) == 4


def test_an_unbounded_wait_halves_the_limit() -> None:
    gate = OverloadGate(CFG, now=0.0)
    fill(gate)
    gate.leave(0.10, math.inf)
    assert gate.limit == 32


def test_client_errors_say_nothing_about_waiting() -> None:
    gate = OverloadGate(CFG, now=0.0)
    fill(gate)
    gate.leave(0.10, None)
    assert gate.limit == 64


def test_the_limit_grows_back_by_its_square_root_while_in_use_and_waits_are_under_the_target() -> None:
    gate = OverloadGate(CFG, now=0.0)
    fill(gate)
    for i in range(1, 3):  # two intervals at 4x the target: 64 -> 32 -> 16
        gate.leave(i * 0.1, 0.200)
    assert gate.limit == 16
    while gate.in_flight > 10:  # 10 of 16 in use: more than half
        gate.leave(0.25, 0.001)
    gate.leave(0.31, 0.001)  # the interval's least wait is under the target: + sqrt(16)
    assert gate.limit == 20
    gate.leave(0.35, 0.001)
    gate.leave(0.40, 0.060)  # mid-interval samples over the target do not matter: the least is 1 ms
    assert gate.limit == 20
    before = gate.in_flight
    assert fill(gate) == 20 - before
    gate.leave(0.42, 0.001)
    assert gate.limit == 20 + math.sqrt(20)


def test_a_limit_mostly_unused_does_not_grow() -> None:
    gate = OverloadGate(CFG, now=0.0)
    fill(gate)
    gate.leave(0.1, 0.400)
    assert gate.limit == 32
    while gate.in_flight > 2:
        gate.leave(0.15, 0.001)
    gate.leave(0.2, 0.001)  # this interval began with 63 in flight: in use, it grows once
    limit = gate.limit
    assert limit == 32 + math.sqrt(32)
    for i in range(3, 10):  # then 2 in flight at most, waits short: nothing says more could be let in usefully
        gate.admit()
        gate.leave(i * 0.1, 0.001)
    assert gate.limit == limit


def test_the_limit_never_grows_past_max_limit() -> None:
    gate = OverloadGate(CFG, now=0.0)
    fill(gate)
    gate.leave(0.1, 0.4)
    assert gate.limit == 32
    for i in range(2, 20):
        fill(gate)
        gate.leave(i * 0.1, 0.001)
    assert gate.limit == 64


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"target_ms": -1.0}, "target_ms must be >= 0"),
        ({"target_ms": math.nan}, "target_ms must be >= 0"),
        ({"interval_ms": 0.0}, "interval_ms must be > 0"),
        ({"min_limit": 0}, "1 <= min_limit <= max_limit"),
        ({"min_limit": 10, "max_limit": 5}, "1 <= min_limit <= max_limit"),
    ],
)
def test_bad_settings_are_refused_with_what_is_expected(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        OverloadConfig(**kwargs)  # type: ignore[arg-type]


def test_target_zero_turns_the_gate_off() -> None:
    assert not OverloadConfig(target_ms=0).enabled
    assert OverloadConfig().enabled
