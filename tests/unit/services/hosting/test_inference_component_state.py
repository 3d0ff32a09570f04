"""The inference components' table (hosting migration 4) on a real SQLite database: unique names ignoring case,
compare-and-set status changes, per-endpoint listing in creation order and keyset pages filtered by endpoint."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from servekit.services.database import StateDB
from servekit.services.hosting.store_rows import AlreadyExists, InferenceComponentRepo, NotFound, StaleStatus
from servekit.state.paging import Listing


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[InferenceComponentRepo]:
    with StateDB.open(tmp_path / "home") as db:
        yield InferenceComponentRepo(db.conn, Clock())


def test_create_get_and_unique_names(repo: InferenceComponentRepo) -> None:
    row = repo.create("alpha", "arn:a", "ep", "AllTraffic", "Creating", 2, {"ModelName": "m"})
    assert (row.name, row.endpoint, row.desired_copies, row.record) == ("alpha", "ep", 2, {"ModelName": "m"})
    assert row.created == row.last_modified
    with pytest.raises(AlreadyExists):
        repo.create("ALPHA", "arn:b", "ep", "AllTraffic", "Creating", 1, {})
    assert repo.get("Alpha") is not None


def test_change_is_compare_and_set(repo: InferenceComponentRepo) -> None:
    repo.create("alpha", "arn:a", "ep", "AllTraffic", "Creating", 1, {})
    moved = repo.change("alpha", expected=("Creating",), status="InService", copies=3)
    assert (moved.status, moved.desired_copies) == ("InService", 3)
    with pytest.raises(StaleStatus) as stale:
        repo.change("alpha", expected=("Creating",), status="Failed")
    assert stale.value.actual == "InService"
    assert repo.change("alpha", failure_reason="why").failure_reason == "why"  # no expectation: always
    repo.delete("alpha")
    with pytest.raises(NotFound):
        repo.change("alpha", status="InService")


def test_listing_filters_by_endpoint_and_pages(repo: InferenceComponentRepo) -> None:
    for i in range(5):
        repo.create(f"c{i}", f"arn:{i}", "one" if i % 2 == 0 else "two", "AllTraffic", "InService", 1, {})
    assert [r.name for r in repo.all("one")] == ["c0", "c2", "c4"]
    listing = Listing(("endpoint = ?",), ("two",), "Name", "Ascending", 1)
    first = repo.page(listing)
    assert [r.name for r in first.items] == ["c1"] and first.next_token
    second = repo.page(Listing(("endpoint = ?",), ("two",), "Name", "Ascending", 1, first.next_token))
    assert [r.name for r in second.items] == ["c3"] and second.next_token is None
