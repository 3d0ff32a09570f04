"""The knee of a stepped run from its phases (``servekit bench --phases``), on fixed numbers: the rule the end-to-end
test against a server whose latency bends cannot check on a machine of unknown speed."""

from __future__ import annotations

from servekit.tools.bench.runner import phase_knee
from servekit.tools.bench.stats import PhaseStats


def _phase(rate: float, p95_ms: float, failed: int = 0) -> PhaseStats:
    ok = int(rate * 2)
    return PhaseStats(
        loop="open", concurrency=None, target_rate=rate, max_outstanding=None, duration_s=2.0,
        requests=ok + failed, ok=ok, ok_rows=ok, dropped=0, errors={"503": failed} if failed else {},
        latency_ms={"p50": p95_ms / 2, "p95": p95_ms}, server_ms=None,
    )  # fmt: skip


def test_the_knee_is_the_first_rate_whose_p95_passes_twice_the_lowest_rates() -> None:
    # a server fast until 60 requests/s, 40 ms beyond: levels of 20, 40, 80 and 160 per second
    knee = phase_knee([_phase(20, 1.2), _phase(40, 1.4), _phase(80, 41.0), _phase(160, 43.0)], 2.0, 20.0)
    assert knee.baseline_ms == 1.2
    assert (knee.knee_rate, knee.knee_latency_ms) == (80.0, 41.0)
    assert knee.last_good_rate == 40.0 and knee.max_rate_under_slo == 40.0
    assert "knee at 80.0 req/s" in knee.summary()


def test_no_knee_when_latency_stays_within_the_factor_and_failures_count_against_the_slo() -> None:
    flat = phase_knee([_phase(20, 5.0), _phase(40, 6.0), _phase(80, 9.9)], 2.0, 8.0)
    assert flat.knee_rate is None and flat.last_good_rate == 80.0 and flat.max_rate_under_slo == 40.0
    failing = phase_knee([_phase(20, 5.0), _phase(40, 5.0, failed=10)], 2.0, 8.0)
    assert failing.max_rate_under_slo == 20.0  # a level that failed requests is not under the SLO
