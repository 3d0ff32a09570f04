"""The overload gate on a manual clock: a limit that shrinks while the least wait of an interval stays over the
target (or nine in ten waits do at a full limit), grows back while it refuses requests and most waits are under the
target, falls toward its use while mostly unused, drops under what was in when a queue behind it is full, and
refuses past it."""

from __future__ import annotations

import dataclasses
import math

import pytest

from servekit.config.models import OverloadConfig
from servekit.errors import ConfigError
from servekit.serving.core.overload import OverloadGate

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


def test_nine_in_ten_waits_over_the_target_at_a_full_limit_shrink_it_though_one_found_no_queue() -> None:
    gate = OverloadGate(CFG, now=0.0)
    fill(gate)
    gate.leave(0.02, 0.0)  # a request that found a thread free: CoDel's least wait alone would see no queue
    for _ in range(8):
        gate.leave(0.05, 0.100)
    gate.leave(0.10, 0.100)  # 9 of 10 over the 50-ms target, mean 90 ms: the limit shrinks by 50 / 90
    assert gate.limit == pytest.approx(64 * 50 / 90)
    fill(gate)
    for _ in range(9):
        gate.leave(0.15, 0.055)
    gate.leave(0.21, 0.0)  # mean 49.5 ms, under the target: still at least a tenth off
    assert gate.limit == pytest.approx(64 * 50 / 90 * 0.9)


def test_most_waits_over_the_target_below_a_full_limit_or_fewer_than_nine_in_ten_do_not_shrink_it() -> None:
    gate = OverloadGate(CFG, now=0.0)
    for _ in range(20):  # the limit (64) is not reached: the waits are not the gate's queue
        gate.admit()
    for _ in range(9):
        gate.leave(0.05, 0.100)
    gate.leave(0.10, 0.0)
    assert gate.limit == 64
    fill(gate)
    for _ in range(7):  # the limit reached, 8 of 10 over
        gate.leave(0.15, 0.100)
    gate.leave(0.16, 0.0)
    gate.leave(0.17, 0.0)
    gate.leave(0.21, 0.100)
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


def shrink_to_16(gate: OverloadGate) -> None:
    """Two intervals at 4x the target: 64 -> 32 -> 16, then in flight drained to 10 of 16."""
    fill(gate)
    for i in range(1, 3):
        gate.leave(i * 0.1, 0.200)
    assert gate.limit == 16
    while gate.in_flight > 10:
        gate.leave(0.25, 0.001)


def test_the_limit_grows_by_its_square_root_while_it_refuses_and_no_wait_reaches_the_target() -> None:
    gate = OverloadGate(CFG, now=0.0)
    shrink_to_16(gate)
    gate.leave(0.31, 0.001)  # nobody was refused in this interval: nothing says more could be let in usefully
    assert gate.limit == 16
    before = gate.in_flight
    assert fill(gate) == 16 - before  # then the limit refuses one
    gate.leave(0.35, 0.001)
    gate.leave(0.40, 0.040)  # under the target
    gate.leave(0.42, 0.001)  # the interval ends: least 1 ms, none over the target: + sqrt(16)
    assert gate.limit == 20


def test_with_some_waits_over_the_target_it_grows_by_one_and_with_most_not_at_all() -> None:
    gate = OverloadGate(CFG, now=0.0)
    shrink_to_16(gate)
    gate.leave(0.31, 0.001)
    fill(gate)
    for wait in (0.001, 0.010, 0.020, 0.080):  # one of four over the target, the least under it
        gate.leave(0.35, wait)
    gate.leave(0.42, 0.010)
    assert gate.limit == 17
    fill(gate)
    for wait in (0.001, 0.080, 0.090):  # most over the target: the queue is at the target already
        gate.leave(0.45, wait)
    gate.leave(0.53, 0.070)
    assert gate.limit == 17


def test_a_mostly_unused_limit_falls_toward_twice_its_use_but_not_under_the_burst_limit() -> None:
    cfg = OverloadConfig(target_ms=50.0, interval_ms=100.0, min_limit=4, max_limit=1024, burst_limit=64)
    gate = OverloadGate(cfg, now=0.0)
    limits = []
    for i in range(1, 7):  # 10 in flight at most, waits short
        for _ in range(10):
            gate.admit()
        while gate.in_flight:
            gate.leave(i * 0.1 - 0.05, 0.001)
        gate.admit()
        gate.leave(i * 0.1, 0.001)
        limits.append(gate.limit)
    assert limits == [512, 256, 128, 64, 64, 64]  # at most halving at once; the burst limit over 2 x 10
    low = OverloadGate(dataclasses.replace(cfg, burst_limit=8), now=0.0)
    for i in range(1, 8):
        for _ in range(10):
            low.admit()
        while low.in_flight:
            low.leave(i * 0.1, 0.001)
    assert low.limit == 20  # twice what is in use


def test_a_limit_under_the_burst_limit_is_not_raised_by_falling_use() -> None:
    gate = OverloadGate(OverloadConfig(target_ms=50.0, interval_ms=100.0, min_limit=4, max_limit=64), now=0.0)
    fill(gate)
    for i in range(1, 4):  # a standing queue: 64 -> 32 -> 16 -> 8
        gate.leave(i * 0.1, 0.4)
    assert gate.limit == 8
    while gate.in_flight:
        gate.leave(0.35, None)
    gate.admit()
    gate.leave(0.41, 0.001)  # one in use, under the burst limit already: it stays
    assert gate.limit == 8


def test_a_full_queue_behind_the_gate_puts_the_limit_under_what_was_in_at_once() -> None:
    gate = OverloadGate(CFG, now=0.0)
    for _ in range(30):
        gate.admit()
    gate.leave(0.01, None, full=True)  # 30 in (this one too) were too many: at most 29
    assert gate.limit == 29 and gate.in_flight == 29
    assert not gate.admit()
    while gate.in_flight > 2:
        gate.leave(0.02, 0.001)
    gate.admit()
    gate.admit()
    gate.leave(0.03, None, full=True)  # never under min_limit
    assert gate.limit == 4


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
        ({"burst_ms": math.nan}, "burst_ms must be >= 0"),
        ({"target_ms": math.nan}, "target_ms must be >= 0"),
        ({"interval_ms": 0.0}, "interval_ms must be > 0"),
        ({"min_limit": 0}, "1 <= min_limit <= max_limit"),
        ({"min_limit": 10, "max_limit": 5}, "1 <= min_limit <= max_limit"),
        ({"burst_limit": 0}, "burst_limit must be >= 1"),
    ],
)
def test_bad_settings_are_refused_with_what_is_expected(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        OverloadConfig(**kwargs)  # type: ignore[arg-type]


def test_target_zero_turns_the_gate_off() -> None:
    assert not OverloadConfig(target_ms=0).enabled
    assert OverloadConfig().enabled


def test_a_fast_model_that_is_refused_grows_its_limit_by_what_its_rate_fits_in_the_target() -> None:
    """Little's law: answers at 4,000 a second, so 200 requests in wait about the 50-ms target; a limit that refuses
    while far under that doubles (at most) rather than growing by its square root."""
    cfg = OverloadConfig(target_ms=50.0, interval_ms=100.0, min_limit=4, max_limit=1024, burst_limit=16)
    gate = OverloadGate(cfg, now=0.0)
    fill(gate)
    for i in range(1, 8):  # a standing queue: 1024 halves to 8
        gate.leave(i * 0.1, 1.0)
    assert gate.limit == 8
    while gate.in_flight:
        gate.leave(0.75, None)
    for _ in range(400):  # 400 answers in the interval, 1 ms waits, and the limit refuses
        fill(gate)
        gate.leave(0.79, 0.001)
    gate.leave(0.81, 0.001)
    assert gate.limit == 16  # twice, not 8 + sqrt(8)


def test_a_mostly_unused_limit_does_not_fall_under_what_its_answer_rate_brings_in_the_burst_window() -> None:
    """The headroom is the answer rate times ``burst_ms``, not times the target: a tighter target (20 ms here, which
    would give 40) does not refuse more of a jump from idle."""
    cfg = OverloadConfig(target_ms=20.0, interval_ms=100.0, min_limit=4, max_limit=1024, burst_limit=16, burst_ms=50.0)
    gate = OverloadGate(cfg, now=0.0)
    limits = []
    for i in range(1, 7):  # 2 in at most, answered at 2,000 a second: 100 arrive in 50 ms
        for _ in range(100):
            gate.admit()
            gate.admit()
            gate.leave(i * 0.1 - 0.05, 0.001)
            gate.leave(i * 0.1 - 0.05, 0.001)
        gate.admit()
        gate.leave(i * 0.1, 0.001)
        limits.append(round(gate.limit))
    assert limits == [512, 256, 128, 100, 100, 100]  # at most halving at once; the rate's share, not the burst limit
