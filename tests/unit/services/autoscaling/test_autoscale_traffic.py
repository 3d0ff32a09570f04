"""Traffic curves for the autoscaling what-if: CSV and JSON files, synthetic shapes, CloudWatch Invocations, and
one-line errors for curves that cannot be replayed."""

from __future__ import annotations

import pytest

from servekit.services.autoscaling.traffic import Curve, TrafficError, from_invocations, parse_csv, parse_file, shape


def test_csv_and_json_give_the_same_curve() -> None:
    csv_curve = parse_csv("time_s,rps\n0,50\n60,90\n120,150\n")
    json_curve = parse_file('[{"time_s": 0, "rps": 50}, [60, 90], {"time_s": 120, "rps": 150}]', "c.json")
    assert csv_curve.points == json_curve.points == ((0.0, 50.0), (60.0, 90.0), (120.0, 150.0))
    assert parse_file("time_s,rps,note\n0,5,a\n", "c.csv").points == ((0.0, 5.0),)


def test_a_curve_holds_each_rate_until_the_next_point() -> None:
    c = parse_csv("time_s,rps\n0,50\n120,150\n")
    assert c.steps(60) == [(0.0, 50.0), (60.0, 50.0), (120.0, 150.0)]
    assert c.at(119.9) == 50 and c.at(500) == 150


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("time_s,rps\n0,50\n60,-5\n", "negative rate at time_s=60: -5 rps"),
        ("time_s,rps\n", "is empty"),
        ("", "is empty"),
        ("time,rate\n0,5\n", "header must name the columns time_s and rps"),
        ("time_s,rps\n0,fifty\n", "row 2: rps 'fifty' is not a number"),
        ("time_s,rps\n0,5\n60\n", "row 3 has 1 column"),
        ("time_s,rps\n60,5\n0,5\n", "times must increase"),
        ("[1, 2", "not valid JSON"),
        ("[]", "is empty"),
    ],
)
def test_bad_curves_are_refused_in_one_line(text: str, message: str) -> None:
    with pytest.raises(TrafficError, match=message) as caught:
        parse_file(text, "curve")
    assert "\n" not in str(caught.value)


def test_synthetic_shapes() -> None:
    steps = shape("steps", 600, 60, 10, 100)
    assert [r for _, r in steps.points] == [10, 10, 10, 10, 100, 100, 100, 10, 10, 10]
    ramp = shape("ramp", 300, 60, 0, 100)
    assert [r for _, r in ramp.points] == [0, 25, 50, 75, 100]
    diurnal = shape("diurnal", 86400, 3600, 10, 110)
    rates = [r for _, r in diurnal.points]
    assert rates[0] == pytest.approx(10) and rates[12] == pytest.approx(110) and max(rates) == rates[12]
    spike = shape("spike", 600, 60, 10, 200, at_s=120, width_s=120)
    assert [r for _, r in spike.points] == [10, 10, 200, 200, 10, 10, 10, 10, 10, 10]
    with pytest.raises(TrafficError, match="unknown traffic shape 'wave'"):
        shape("wave", 60, 60, 1, 2)
    with pytest.raises(TrafficError, match="must not be negative"):
        shape("ramp", 60, 60, -1, 2)


def test_a_curve_from_cloudwatch_invocations() -> None:
    t0 = 1_700_000_040.0
    c = from_invocations([(t0 + 120, 600.0), (t0, 3000.0)], 60, "ep")  # a missing minute is idle
    assert c.points == ((0.0, 50.0), (60.0, 0.0), (120.0, 10.0))
    with pytest.raises(TrafficError, match="no Invocations datapoints"):
        from_invocations([], 60, "ep")


def test_curve_invariants() -> None:
    with pytest.raises(TrafficError, match="empty"):
        Curve(())
    with pytest.raises(TrafficError, match="positive"):
        Curve(((0.0, 1.0),)).steps(0)
