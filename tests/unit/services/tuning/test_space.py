"""Search spaces and strategies: seeded, replayable, SageMaker's rules for ranges."""

from __future__ import annotations

import pytest

from servekit.services.tuning.space import (
    BayesianSearch,
    GridSearch,
    HyperbandSearch,
    Param,
    SpaceError,
    hyperband_resources,
    native,
    parse,
    strategy,
)

RANGES = {
    "ContinuousParameterRanges": [{"Name": "lr", "MinValue": "0.001", "MaxValue": "1", "ScalingType": "Logarithmic"}],
    "IntegerParameterRanges": [{"Name": "depth", "MinValue": "1", "MaxValue": "4"}],
    "CategoricalParameterRanges": [{"Name": "kind", "Values": ["a", "b"]}],
}


def test_random_search_is_replayed_by_its_seed_and_stays_in_range() -> None:
    params = parse(RANGES)
    first = [strategy("Random", params, 7, True).suggest("j0") for _ in range(1)]
    a, b = strategy("Random", params, 7, True), strategy("Random", params, 7, True)
    runs = [a.suggest(f"j{i}") for i in range(20)], [b.suggest(f"j{i}") for i in range(20)]
    assert runs[0] == runs[1] and runs[0][0] == first[0]
    for hp in runs[0]:
        assert hp is not None
        assert 0.001 <= float(hp["lr"]) <= 1 and 1 <= int(hp["depth"]) <= 4 and hp["kind"] in ("a", "b")


def test_grid_visits_every_combination_once_and_refuses_continuous_ranges() -> None:
    grid = GridSearch(parse({k: v for k, v in RANGES.items() if k != "ContinuousParameterRanges"}))
    seen = []
    while (hp := grid.suggest(f"j{len(seen)}")) is not None:
        seen.append((hp["depth"], hp["kind"]))
    assert sorted(seen) == sorted((str(d), k) for d in range(1, 5) for k in "ab")
    with pytest.raises(SpaceError, match="categorical and integer"):
        GridSearch(parse(RANGES))


def test_bayesian_search_converges_on_a_toy_objective() -> None:
    params = parse({"ContinuousParameterRanges": [{"Name": "x", "MinValue": "0", "MaxValue": "1"}]})
    search = strategy("Bayesian", params, 3, True)
    best = -1.0
    for i in range(30):
        hp = search.suggest(f"j{i}")
        assert hp is not None
        value = 1 - (float(hp["x"]) - 0.3) ** 2
        best = max(best, value)
        search.observe(f"j{i}", value)
    assert best > 0.999  # within ~0.03 of the peak


@pytest.mark.parametrize(
    ("ranges", "message"),
    [
        ({}, "names no hyperparameter"),
        ({"IntegerParameterRanges": [{"Name": "d", "MinValue": "5", "MaxValue": "1"}]}, "above MaxValue"),
        (
            {
                "ContinuousParameterRanges": [
                    {"Name": "l", "MinValue": "0", "MaxValue": "1", "ScalingType": "Logarithmic"}
                ]
            },
            "MinValue > 0",
        ),
        ({"CategoricalParameterRanges": [{"Name": "k", "Values": []}]}, "needs Values"),
    ],
)
def test_bad_ranges_say_why(ranges: dict[str, object], message: str) -> None:
    with pytest.raises(SpaceError, match=message):
        parse(ranges)


# ---- Hyperband ---------------------------------------------------------------------------------------------------
X = parse({"ContinuousParameterRanges": [{"Name": "x", "MinValue": "0", "MaxValue": "1"}]})


def quality(hp: dict[str, str]) -> float:
    return 1 - (float(hp["x"]) - 0.3) ** 2


def hyperband_run(seed: int, jobs: int = 20, parallel: int = 1) -> list[tuple[str, float, int, str]]:
    """A Hyperband search over a toy learning curve (better with each epoch, peaking at x = 0.3): ``parallel``
    jobs at a time, their epochs interleaved; each job's (name, quality, epochs it ran, why it stopped)."""
    search = strategy("Hyperband", X, seed, True, (1, 9))
    assert isinstance(search, HyperbandSearch)
    out: list[tuple[str, float, int, str]] = []
    running: dict[str, tuple[float, list[float]]] = {}
    launched = 0
    while launched < jobs or running:
        while len(running) < parallel and launched < jobs:
            job = f"j{launched}"
            launched += 1
            hp = search.suggest(job)
            assert hp is not None
            running[job] = (quality(hp), [])
        for job, (q, values) in list(running.items()):  # one epoch each, in launch order
            values.append(q - 0.5 / (len(values) + 1))
            reason = search.progress(job, values)
            if reason is not None or len(values) == 40:
                del running[job]
                search.observe(job, values[-1])
                out.append((job, q, len(values), reason or "ended"))
    return out


@pytest.mark.parametrize("parallel", [1, 3])
def test_hyperband_stops_the_weak_early_and_the_rest_at_max_resource_replayed_by_its_seed(parallel: int) -> None:
    run = hyperband_run(5, parallel=parallel)
    assert run == hyperband_run(5, parallel=parallel)  # the seed fixes every draw, bracket and decision
    assert run != hyperband_run(6, parallel=parallel)
    for _job, _q, epochs, reason in run:
        assert 1 <= epochs <= 9  # never past MaxResource (the curve would go on to 40)
        assert reason.startswith("Hyperband stopped it")
        assert ("MaxResource" in reason) == (epochs == 9)
    early = [r for r in run if r[2] < 9]
    assert len(early) >= len(run) // 2  # most configurations get a small budget
    best = max(run, key=lambda r: r[1])
    assert best[2] == 9  # the best configuration gets the whole budget
    # stopped only at a rung (1, 3 or 9 epochs with reduction factor 3) and never before MinResource
    assert {r[2] for r in run} <= {1, 3, 9}


def test_hyperband_respects_min_resource_and_says_why_once() -> None:
    search = strategy("Hyperband", X, 0, False, (3, 9))  # seed 0: both trials in the bracket that stops at 3
    assert isinstance(search, HyperbandSearch)
    first, second = search.suggest("a"), search.suggest("b")
    assert first is not None and second is not None
    assert search.progress("a", [0.1, 0.1, 0.1]) is None  # the first at a rung goes on
    assert search.progress("b", [9.0]) is None and search.progress("b", [9.0, 9.0]) is None  # before MinResource
    reason = search.progress("b", [9.0, 9.0, 9.0])  # minimizing: 9 is worse than 0.1 at 3 epochs
    assert reason is not None and "after 3 epoch(s)" in reason
    assert search.progress("b", [9.0] * 5) is None  # said once
    search.observe("b", 9.0)
    assert search.study.trials[1].state.name == "PRUNED"


@pytest.mark.parametrize(
    ("config", "static", "expected"),
    [
        ({"MinResource": 2, "MaxResource": 20}, {}, (2, 20)),
        ({}, {"epochs": "12"}, (1, 12)),
        ({}, {"num_epochs": '"7"'}, (1, 7)),  # the SDK sends json.dumps of each value
        ({"MaxResource": 5}, {"epochs": "12"}, (1, 5)),
    ],
)
def test_hyperband_resources_and_max_resource_from_epochs(
    config: dict[str, int], static: dict[str, str], expected: tuple[int, int]
) -> None:
    assert hyperband_resources(config, static) == expected


@pytest.mark.parametrize(
    ("config", "static", "message"),
    [
        ({}, {"lr": "0.1"}, "needs StrategyConfig.HyperbandStrategyConfig.MaxResource"),
        ({}, {"epochs": "many"}, "cannot be inferred from the static hyperparameter epochs"),
        ({"MinResource": 10, "MaxResource": 5}, {}, "MinResource 10 is above MaxResource 5"),
        ({"MaxResource": 20001}, {}, "between 1 and 20000"),
    ],
)
def test_hyperband_resources_refused_say_why(config: dict[str, int], static: dict[str, str], message: str) -> None:
    with pytest.raises(SpaceError, match=message):
        hyperband_resources(config, static)


# ---- warm start's seeds --------------------------------------------------------------------------------------------
def test_seeding_adds_the_results_that_fit_the_ranges_as_finished_trials() -> None:
    params = parse(RANGES)
    search = strategy("Bayesian", params, 3, True)
    assert isinstance(search, BayesianSearch)
    history = [
        ({"lr": "0.01", "depth": "2", "kind": "a", "other": "x"}, 0.5),
        ({"lr": "0.1", "depth": "4", "kind": "b"}, 0.9),
        ({"lr": "5.0", "depth": "2", "kind": "a"}, 0.99),  # lr outside this search's range
        ({"lr": "0.1", "depth": "2.5", "kind": "a"}, 0.99),  # not an integer
        ({"lr": "0.1", "depth": "2", "kind": "c"}, 0.99),  # not a category here
        ({"depth": "2", "kind": "a"}, 0.99),  # lr unknown
        ({"lr": "0.1", "depth": "2", "kind": "a"}, float("nan")),
    ]
    assert search.seed(history) == 2
    assert [t.state.name for t in search.study.trials] == ["COMPLETE", "COMPLETE"]
    assert search.study.best_value == 0.9 and search.study.best_params == {"lr": 0.1, "depth": 4, "kind": "b"}
    hp = search.suggest("next")  # the search goes on from there
    assert hp is not None and len(search.study.trials) == 3
    assert strategy("Random", params, 3, True).seed(history) == 0


@pytest.mark.parametrize(
    ("kind", "value", "expected"),
    [
        ("integer", "3", 3),
        ("integer", "3.0", 3),
        ("integer", "3.5", None),
        ("integer", "9", None),
        ("continuous", "0.5", 0.5),
        ("continuous", '"0.5"', 0.5),
        ("continuous", "x", None),
        ("categorical", "a", "a"),
        ("categorical", "z", None),
    ],
)
def test_native_values_of_a_range(kind: str, value: str, expected: object) -> None:
    param = Param("p", kind, 0, 4, values=("a", "b"))
    assert native(param, value) == expected
