"""The registry aggregate on a real SQLite file: version numbers, compare-and-set approval with its events, names
ignoring case, deletion rules, paging, and a manual clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from servekit.services.database import StateDB
from servekit.services.registry.store import AlreadyExists, GroupNotEmpty, NotFound, Registry, StaleApproval


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def arn(group: str, version: int) -> str:
    return f"arn:aws:sagemaker:us-east-1:000000000000:model-package/{group.lower()}/{version}"


@pytest.fixture
def repo(tmp_path: Path) -> Registry:
    db = StateDB.open(tmp_path)
    return Registry(db.conn, clock=Clock())


def test_versions_count_up_and_are_never_reused(repo: Registry) -> None:
    repo.create_group("Churn", "g-arn")
    rows = [repo.create_version("churn", arn, "PendingManualApproval", {"n": i}, "AKIA1") for i in range(3)]
    assert [(r.name, r.version, r.arn) for r in rows] == [("Churn", v, arn("churn", v)) for v in (1, 2, 3)]
    repo.delete_package(rows[2].arn)
    assert repo.create_version("CHURN", arn, "Approved", {}).version == 4  # 3 stays retired
    assert repo.get_version("churn", 2) == rows[1]
    with pytest.raises(NotFound):
        repo.create_version("fraud", arn, "Approved", {})


def test_groups_are_unique_ignoring_case_and_refuse_deletion_while_holding_packages(repo: Registry) -> None:
    repo.create_group("Churn", "g-arn", "desc", [{"Key": "k", "Value": "v"}], "AKIA1")
    with pytest.raises(AlreadyExists):
        repo.create_group("CHURN", "g-arn")
    group = repo.get_group("churn")
    assert group is not None and (group.name, group.tags, group.created_by) == (
        "Churn",
        [{"Key": "k", "Value": "v"}],
        "AKIA1",
    )
    row = repo.create_version("churn", arn, "Rejected", {})
    with pytest.raises(GroupNotEmpty):
        repo.delete_group("churn")
    repo.delete_package(row.arn)
    repo.delete_group("churn")
    with pytest.raises(NotFound):
        repo.delete_group("churn")


def test_approval_is_compare_and_set_with_an_event_per_change(repo: Registry) -> None:
    repo.create_group("churn", "g-arn")
    row = repo.create_version("churn", arn, "PendingManualApproval", {"a": 1}, "AKIA1")
    updated = repo.set_approval(
        row.arn, expected="PendingManualApproval", to="Approved", actor="AKIA2", reason="ok", record=None
    )
    assert (updated.approval, updated.approval_description, updated.modified_by) == ("Approved", "ok", "AKIA2")
    assert updated.record == {"a": 1} and updated.modified > row.modified
    with pytest.raises(StaleApproval) as exc:  # a second writer that read "Pending" loses
        repo.set_approval(
            row.arn, expected="PendingManualApproval", to="Rejected", actor="AKIA3", reason="", record=None
        )
    assert exc.value.actual == "Approved"
    repo.set_approval(row.arn, expected="Approved", to="Approved", actor="AKIA2", reason="still ok", record=None)
    events = repo.events(row.arn)
    assert [(e.from_status, e.to_status, e.actor, e.reason) for e in events] == [
        (None, "PendingManualApproval", "AKIA1", "created"),
        ("PendingManualApproval", "Approved", "AKIA2", "ok"),
    ]  # no event for "no change"
    assert events[0].at < events[1].at
    repo.add_event(row.arn, "deployment", "AKIA2", {"EndpointName": "ep"})
    repo.delete_package(row.arn)
    assert [e.kind for e in repo.events(row.arn)] == ["approval", "approval", "deployment"]  # history outlives it


def test_unversioned_packages_are_unique_by_name(repo: Registry) -> None:
    repo.create_unversioned("Base", "arn:base", {})
    with pytest.raises(AlreadyExists):
        repo.create_unversioned("base", "arn:base2", {})
    row = repo.get_unversioned("BASE")
    assert row is not None and row.group_name is None and row.version is None and row.approval is None


def test_listing_filters_and_pages(repo: Registry) -> None:
    repo.create_group("churn", "g1")
    repo.create_group("fraud", "g2")
    for status in ("Approved", "Rejected", "Approved"):
        repo.create_version("churn", arn, status, {})
    repo.create_version("fraud", arn, "Approved", {})
    repo.create_unversioned("base", "arn:base", {})
    first = repo.list_packages(group="churn", max_results=2)
    assert [r.version for r in first.items] == [1, 2] and first.next_token
    rest = repo.list_packages(group="churn", max_results=2, next_token=first.next_token)
    assert [r.version for r in rest.items] == [3] and rest.next_token is None
    assert [r.version for r in repo.list_packages(group="churn", approval="Approved").items] == [1, 3]
    assert [r.name for r in repo.list_packages(versioned=False).items] == ["base"]
    assert len(repo.list_packages(versioned=True, approval="Approved").items) == 3
    assert [r.name for r in repo.list_packages(versioned=None, sort_by="Name", sort_order="Descending").items][:1] == [
        "fraud"
    ]
    with pytest.raises(ValueError):
        repo.list_packages(group="fraud", next_token=first.next_token)  # another listing's token
    assert [g.name for g in repo.list_groups(name_contains="RAU").items] == ["fraud"]
