"""The release decision as a table on a manual clock, and the cost model."""

import pytest

from servekit.config.models import BatchingConfig
from servekit.errors import ConfigError
from servekit.serving.batching.policy import CostModel, Decision, QueueView, ReleaseReason, decide

CFG = BatchingConfig(max_batch_size=8, batch_timeout_micros=2000, num_batch_threads=2)
T0 = 100.0


def view(now: float = T0, rows: int = 1, executing: int = 1, rate: float = 0.0) -> QueueView:
    return QueueView(
        now=now,
        oldest_enqueued=T0,
        queued_rows=rows,
        executing=executing,
        free_slots=CFG.num_batch_threads - executing,
        arrival_rate=rate,
    )


@pytest.mark.parametrize(
    ("v", "expected"),
    [
        (view(rows=0, executing=0), Decision(None)),  # nothing queued
        (view(rows=8, executing=2), Decision(None)),  # no free slot, even when full
        (view(rows=8), Decision(ReleaseReason.FULL)),
        (view(rows=20), Decision(ReleaseReason.FULL)),
        (view(rows=1, executing=0), Decision(ReleaseReason.IDLE)),  # a lone request runs at once
        (view(rows=3), Decision(None, T0 + 0.002)),  # one batch running, wait up to the timeout
        (view(now=T0 + 0.001, rows=3), Decision(None, T0 + 0.002)),
        (view(now=T0 + 0.002, rows=3), Decision(ReleaseReason.TIMEOUT)),
        (view(now=T0 + 0.5, rows=3), Decision(ReleaseReason.TIMEOUT)),
    ],
)
def test_decide(v: QueueView, expected: Decision) -> None:
    assert decide(v, CFG) == expected


def trained(a: float, b: float) -> CostModel:
    m = CostModel()
    for rows in (1, 2, 4, 8, 16, 32, 1, 8, 4, 2):
        m.observe(rows, a + b * rows)
    return m


def test_cost_model_recovers_a_line() -> None:
    m = trained(0.001, 0.0005)
    a, b = m.coefficients()
    assert a == pytest.approx(0.001, rel=1e-6)
    assert b == pytest.approx(0.0005, rel=1e-6)
    assert m.predict(10) == pytest.approx(0.006)


def test_cost_model_needs_samples() -> None:
    m = CostModel(min_samples=3)
    m.observe(4, 0.01)
    assert not m.ready
    m.observe(4, 0.01)
    m.observe(4, 0.01)
    assert m.ready
    assert m.coefficients() == pytest.approx((0.01, 0.0))  # one size seen: all cost per batch


ADAPTIVE = BatchingConfig(max_batch_size=64, batch_timeout_micros=50_000, num_batch_threads=2, target_p99_ms=20)


def test_adaptive_waits_while_there_is_slack() -> None:
    cost = trained(0.001, 0.0001)  # 8 rows cost 1.8 ms
    d = decide(QueueView(T0, T0, 8, 1, 1, arrival_rate=10_000), ADAPTIVE, cost)
    assert d.release is None
    slack = 0.010 - cost.predict(8)
    assert d.wake_at == pytest.approx(T0 + slack)  # earlier than the 50 ms timeout


def test_adaptive_releases_when_slack_is_spent() -> None:
    cost = trained(0.001, 0.0001)
    d = decide(QueueView(T0 + 0.0085, T0, 8, 1, 1, arrival_rate=10_000), ADAPTIVE, cost)
    assert d.release is ReleaseReason.TARGET


def test_adaptive_releases_when_waiting_cannot_pay_off() -> None:
    cost = trained(0.001, 0.0001)
    d = decide(QueueView(T0, T0, 2, 1, 1, arrival_rate=10.0), ADAPTIVE, cost)  # 10 rows/s: none in 8 ms
    assert d.release is ReleaseReason.TARGET


def test_adaptive_without_a_model_falls_back_to_timeout() -> None:
    d = decide(QueueView(T0, T0, 2, 1, 1, arrival_rate=10.0), ADAPTIVE, CostModel())
    assert d == Decision(None, T0 + 0.05)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"max_batch_size": 0}, "max_batch_size"),
        ({"num_batch_threads": 0}, "num_batch_threads"),
        ({"allowed_batch_sizes": (4, 2, 8), "max_batch_size": 8}, "increasing"),
        ({"allowed_batch_sizes": (2, 4), "max_batch_size": 8}, "must equal"),
        ({"target_p99_ms": 0}, "target_p99_ms"),
    ],
)
def test_config_validation(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        BatchingConfig(**kwargs)  # type: ignore[arg-type]
