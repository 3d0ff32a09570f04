"""SageMaker's early stopping (TrainingJobEarlyStoppingType Auto) as pure decisions: objective values per epoch in,
the reason to stop out."""

from __future__ import annotations

import random

import pytest

from servekit.services.tuning.stopping import MedianStopping, median_rule


def test_the_median_of_running_averages_decides() -> None:
    earlier = [[0.1, 0.9], [0.5, 0.5], [0.2, 0.6, 0.9]]  # running averages at epoch 2: 0.5, 0.5, 0.4 -> median 0.5
    assert median_rule([0.0, 0.49], earlier, maximize=True) == pytest.approx(0.5)
    assert median_rule([0.0, 0.5], earlier, maximize=True) is None  # as good as the median goes on
    assert median_rule([0.0, 0.51], earlier, maximize=False) == pytest.approx(0.5)
    assert median_rule([0.0, 0.3], earlier, maximize=False) is None
    # at epoch 3 only the job that got there counts: its running average is 0.5667
    assert median_rule([0, 0, 0.56], earlier, maximize=True) == pytest.approx(1.7 / 3)
    assert median_rule([0, 0, 0, 0], earlier, maximize=True) is None  # nobody reached epoch 4
    assert median_rule([0.3], [], maximize=True) is None  # the first job runs
    assert median_rule([], earlier, maximize=True) is None


def test_median_stopping_compares_each_job_with_the_jobs_launched_before_it_once() -> None:
    rule = MedianStopping(maximize=True)
    for job in ("a", "b", "c"):
        rule.launched(job)
    assert rule.progress("b", [0.1, 0.1]) is None  # nothing earlier than b has values yet
    assert rule.progress("a", [0.5]) is None  # the first job is never stopped
    reason = rule.progress("c", [0.6, 0.2])  # epoch 1: 0.6 >= median(0.5, 0.1); epoch 2: 0.2 > 0.1 (only b's)
    assert reason is None
    rule.ended("a", [0.5, 0.5, 0.5])
    reason = rule.progress("c", [0.6, 0.2, 0.3])  # epoch 3: a's running average 0.5 is the only one -> stop
    assert reason is not None and "0.3 after epoch 3" in reason and "median 0.5" in reason
    assert rule.progress("c", [0.6, 0.2, 0.3, 0.1]) is None  # once per job
    rule.launched("d")
    assert rule.progress("d", [0.05]) is not None  # median of a, b, c at epoch 1: 0.5


def test_median_stopping_replays_and_stops_only_below_the_median() -> None:
    """A seeded crowd of learning curves: every stop is explained by the rule at that epoch, nothing else stops."""

    def curves(seed: int) -> list[list[float]]:
        rng = random.Random(seed)
        return [[rng.uniform(0, 1) * (1 - 0.5**e) for e in range(1, 11)] for _ in range(12)]

    def run(seed: int) -> dict[str, int]:
        rule, stopped = MedianStopping(maximize=True), {}
        for i, curve in enumerate(curves(seed)):  # one job after another
            job = f"j{i}"
            rule.launched(job)
            for n in range(1, len(curve) + 1):
                if rule.progress(job, curve[:n]) is not None:
                    stopped[job] = n
                    break
            rule.ended(job, curve[: stopped.get(job, len(curve))])
        return stopped

    stopped = run(11)
    assert stopped == run(11) and stopped != run(12)
    assert 0 < len(stopped) < 12 and "j0" not in stopped
    all_curves = curves(11)
    for i, curve in enumerate(all_curves):
        seen = [c[: stopped.get(f"j{k}", len(c))] for k, c in enumerate(all_curves[:i])]
        firsts = [n for n in range(1, len(curve) + 1) if median_rule(curve[:n], seen, True) is not None]
        assert stopped.get(f"j{i}") == (firsts[0] if firsts else None)
