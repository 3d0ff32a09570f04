"""Variant choice by weight and instance choice by outstanding requests, with seeded randomness."""

from __future__ import annotations

import random

import pytest
from scipy.stats import binomtest

from servekit.gateway.routing import choose_variant, least_outstanding


def test_weights_split_traffic_in_proportion() -> None:
    rng = random.Random(7)
    n = 20_000
    hits = sum(choose_variant([("a", 70.0), ("b", 30.0)], rng.random()) == "a" for _ in range(n))
    assert binomtest(hits, n, 0.7).pvalue > 1e-4


@pytest.mark.parametrize(("u", "expected"), [(0.0, "a"), (0.6999, "a"), (0.7, "b"), (0.99999, "b")])
def test_the_boundaries_fall_where_the_weights_say(u: float, expected: str) -> None:
    assert choose_variant([("a", 0.7), ("b", 0.3)], u) == expected


def test_zero_weight_variants_get_nothing_and_all_zero_is_none() -> None:
    assert {choose_variant([("a", 0.0), ("b", 2.0)], u / 10) for u in range(10)} == {"b"}
    assert choose_variant([("a", 0.0), ("b", 0.0)], 0.5) is None
    assert choose_variant([], 0.5) is None


def test_the_fewest_outstanding_wins_and_ties_spread() -> None:
    assert least_outstanding([("i1", 3), ("i2", 1), ("i3", 2)], 0.9) == "i2"
    picks = {least_outstanding([("i1", 0), ("i2", 0), ("i3", 5)], u / 100) for u in range(100)}
    assert picks == {"i1", "i2"}
    assert least_outstanding([], 0.1) is None


def test_an_unknown_endpoint_is_named_with_the_planes_account() -> None:
    """Not "account local": the account every ARN of the plane carries (issue 46, item 7)."""
    from servekit.gateway.service import Gateway, GatewayError, RoutingTable

    with pytest.raises(GatewayError) as err:
        Gateway(RoutingTable()).choose("nope")
    assert err.value.message == "Endpoint nope of account 000000000000 not found."
    with pytest.raises(GatewayError) as err:
        Gateway(RoutingTable(), account_id="123456789012").choose("nope")
    assert "of account 123456789012 not found" in err.value.message
