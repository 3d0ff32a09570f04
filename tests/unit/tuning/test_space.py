"""Search spaces and strategies: seeded, replayable, SageMaker's rules for ranges."""

from __future__ import annotations

import pytest

from servekit.tuning.space import GridSearch, SpaceError, parse, strategy

RANGES = {
    "ContinuousParameterRanges": [{"Name": "lr", "MinValue": "0.001", "MaxValue": "1", "ScalingType": "Logarithmic"}],
    "IntegerParameterRanges": [{"Name": "depth", "MinValue": "1", "MaxValue": "4"}],
    "CategoricalParameterRanges": [{"Name": "kind", "Values": ["a", "b"]}],
}


def test_random_search_is_replayed_by_its_seed_and_stays_in_range() -> None:
    params = parse(RANGES)
    first = [strategy("Random", params, 7, True).suggest() for _ in range(1)]
    a, b = strategy("Random", params, 7, True), strategy("Random", params, 7, True)
    runs = [a.suggest() for _ in range(20)], [b.suggest() for _ in range(20)]
    assert runs[0] == runs[1] and runs[0][0] == first[0]
    for hp in runs[0]:
        assert hp is not None
        assert 0.001 <= float(hp["lr"]) <= 1 and 1 <= int(hp["depth"]) <= 4 and hp["kind"] in ("a", "b")


def test_grid_visits_every_combination_once_and_refuses_continuous_ranges() -> None:
    grid = GridSearch(parse({k: v for k, v in RANGES.items() if k != "ContinuousParameterRanges"}))
    seen = []
    while (hp := grid.suggest()) is not None:
        seen.append((hp["depth"], hp["kind"]))
    assert sorted(seen) == sorted((str(d), k) for d in range(1, 5) for k in "ab")
    with pytest.raises(SpaceError, match="categorical and integer"):
        GridSearch(parse(RANGES))


def test_bayesian_search_converges_on_a_toy_objective() -> None:
    params = parse({"ContinuousParameterRanges": [{"Name": "x", "MinValue": "0", "MaxValue": "1"}]})
    search = strategy("Bayesian", params, 3, True)
    best = -1.0
    for _ in range(30):
        hp = search.suggest()
        assert hp is not None
        value = 1 - (float(hp["x"]) - 0.3) ** 2
        best = max(best, value)
        search.observe(hp, value)
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


def test_hyperband_is_refused_with_the_strategies_that_work() -> None:
    with pytest.raises(SpaceError, match="Bayesian, Random or Grid"):
        strategy("Hyperband", parse(RANGES), 0, True)
