"""The hosting repository on a real SQLite database: unique names, atomic status changes with history,
deletion, instances, and listings whose NextToken pages stay stable while rows are inserted."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from servekit.services.database import StateDB
from servekit.services.hosting.store import (
    UNSET,
    AlreadyExists,
    ContainerSpec,
    EndpointRow,
    Hosting,
    InvalidNextToken,
    NotFound,
    StaleStatus,
    VariantState,
)
from servekit.state import schema_versions


class Clock:
    """Seconds that advance by one each time they are read: every row gets its own, known time."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


@pytest.fixture
def db(tmp_path: Path) -> Iterator[StateDB]:
    with StateDB.open(tmp_path / "home") as opened:
        yield opened


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def hosting(db: StateDB, clock: Clock) -> Hosting:
    return Hosting(db.conn, clock=clock)


def _arn(kind: str, name: str) -> str:
    return f"arn:aws:sagemaker:us-east-1:000000000000:{kind}/{name.lower()}"


V1 = (VariantState("AllTraffic", 1.0, 1.0, 1, 1),)


def _endpoint(h: Hosting, name: str, status: str = "Creating") -> EndpointRow:
    return h.create_endpoint(name, _arn("endpoint", name), "cfg", status, V1, {"Tags": []}, reason="CreateEndpoint")


# ---- schema ------------------------------------------------------------------------------------------------------


def test_the_hosting_aggregate_is_migrated_with_its_tables(db: StateDB) -> None:
    assert schema_versions(db.conn)["hosting"] == 4  # 2: gateway replicas' routes; 3: async queue; 4: components
    tables = {r[0] for r in db.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {
        "hosting_models",
        "hosting_endpoint_configs",
        "hosting_endpoints",
        "hosting_endpoint_history",
        "hosting_instances",
        "hosting_routes",
        "hosting_leader",
        "hosting_async_invocations",
    } <= tables
    assert isinstance(db.hosting, Hosting) and db.hosting is db.hosting


def test_rows_survive_closing_and_reopening(tmp_path: Path) -> None:
    with StateDB.open(tmp_path) as first:
        _endpoint(first.hosting, "ep")
    with StateDB.open(tmp_path) as second:
        row = second.hosting.get_endpoint("ep")
        assert row is not None and row.status == "Creating" and row.variants == V1


# ---- models and endpoint configs ---------------------------------------------------------------------------------


def test_a_model_round_trips_with_its_container_and_record(hosting: Hosting) -> None:
    container = ContainerSpec("img:1", "s3://b/model.tar.gz", {"A": "1"}, "SingleModel")
    made = hosting.create_model("My-Model", _arn("model", "My-Model"), container, {"ModelName": "My-Model"})
    got = hosting.get_model("My-Model")
    assert got == made
    assert got.container.environment == {"A": "1"} and got.record == {"ModelName": "My-Model"}
    assert got.created == 1001.0


def test_names_are_unique_per_kind_ignoring_case_and_keep_their_spelling(hosting: Hosting) -> None:
    hosting.create_model("Thing", _arn("model", "Thing"), ContainerSpec())
    with pytest.raises(AlreadyExists) as caught:
        hosting.create_model("tHING", _arn("model", "thing"), ContainerSpec())
    assert (caught.value.kind, caught.value.name) == ("model", "tHING")
    # another kind may use the same name
    hosting.create_endpoint_config("Thing", _arn("endpoint-config", "Thing"), [{"VariantName": "A"}])
    _endpoint(hosting, "Thing")
    got = hosting.get_model("thing")  # lookups ignore case too
    assert got is not None and got.name == "Thing"


def test_an_endpoint_config_round_trips(hosting: Hosting) -> None:
    variants = [{"VariantName": "A", "ModelName": "m", "InitialInstanceCount": 2, "InitialVariantWeight": 0.7}]
    capture = {"EnableCapture": True, "InitialSamplingPercentage": 50, "DestinationS3Uri": "s3://b/c"}
    hosting.create_endpoint_config("cfg", _arn("endpoint-config", "cfg"), variants, capture, {"Tags": []})
    got = hosting.get_endpoint_config("cfg")
    assert got is not None
    assert got.variants == tuple(variants) and got.data_capture == capture and got.record == {"Tags": []}
    hosting.create_endpoint_config("plain", _arn("endpoint-config", "plain"), variants)
    plain = hosting.get_endpoint_config("plain")
    assert plain is not None and plain.data_capture is None


def test_deleting_a_missing_thing_says_so(hosting: Hosting) -> None:
    with pytest.raises(NotFound):
        hosting.delete_model("nope")
    with pytest.raises(NotFound):
        hosting.delete_endpoint_config("nope")
    with pytest.raises(NotFound):
        hosting.delete_endpoint("nope")
    hosting.create_model("m", _arn("model", "m"), ContainerSpec())
    hosting.delete_model("M")
    assert hosting.get_model("m") is None


# ---- endpoints: status changes and history -----------------------------------------------------------------------


def test_a_status_change_is_compare_and_set_and_records_history(hosting: Hosting) -> None:
    created = _endpoint(hosting, "ep")
    assert (created.status, created.created, created.last_modified) == ("Creating", 1001.0, 1001.0)
    done = hosting.transition("ep", "InService", expected="Creating", reason="instances healthy")
    assert done.status == "InService" and done.last_modified == 1002.0 and done.created == 1001.0
    with pytest.raises(StaleStatus) as caught:
        hosting.transition("ep", "InService", expected="Creating")
    assert caught.value.actual == "InService"
    assert hosting.get_endpoint("ep") == done  # the refused change wrote nothing
    history = hosting.history("ep")
    assert [(h.from_status, h.to_status, h.reason, h.at) for h in history] == [
        (None, "Creating", "CreateEndpoint", 1001.0),
        ("Creating", "InService", "instances healthy", 1002.0),
    ]
    with pytest.raises(NotFound):
        hosting.transition("gone", "InService", expected="Creating")


def test_an_update_sets_and_clears_the_pending_config_with_its_status(hosting: Hosting) -> None:
    _endpoint(hosting, "ep", "InService")
    updating = hosting.transition("ep", "Updating", expected=("InService", "Failed"), pending_config_name="cfg2")
    assert (updating.pending_config_name, updating.pending_since) == ("cfg2", updating.last_modified)
    assert updating.config_name == "cfg"
    green = (VariantState("B", 1.0, 1.0, 2, 2),)
    done = hosting.transition(
        "ep", "InService", expected="Updating", config_name="cfg2", pending_config_name=None, variants=green
    )
    assert (done.config_name, done.pending_config_name, done.pending_since, done.variants) == (
        "cfg2",
        None,
        None,
        green,
    )
    failed = hosting.transition("ep", "Failed", expected="InService", failure_reason="model failed to load")
    assert failed.failure_reason == "model failed to load"
    assert failed.config_name == "cfg2"  # UNSET fields are left alone
    assert repr(UNSET) == "UNSET"


def test_set_variants_changes_weights_without_a_status_change(hosting: Hosting) -> None:
    _endpoint(hosting, "ep", "InService")
    two = (VariantState("A", 0.7, 0.7, 1, 1), VariantState("B", 0.3, 0.5, 1, 2))
    row = hosting.set_variants("ep", two)
    assert row.variants == two and row.status == "InService"
    assert len(hosting.history("ep")) == 1
    with pytest.raises(NotFound):
        hosting.set_variants("nope", two)


def test_a_deleted_endpoint_is_gone_with_its_instances_but_its_history_stays(hosting: Hosting) -> None:
    first = _endpoint(hosting, "ep", "InService")
    hosting.add_instance("i-1", "ep", "cfg", "AllTraffic", "ml.m5.large", "Healthy")
    hosting.add_instance("i-other", "other", "cfg", "AllTraffic", "ml.m5.large", "Healthy")
    hosting.transition("ep", "Deleting", expected="InService")
    hosting.delete_endpoint("ep")
    assert hosting.get_endpoint("ep") is None
    assert hosting.get_instance("i-1") is None and hosting.get_instance("i-other") is not None
    assert [h.to_status for h in hosting.history("ep")] == ["InService", "Deleting"]
    second = _endpoint(hosting, "ep")  # the name is free again; its history is told apart by the id
    assert second.id != first.id
    assert [h.endpoint_id for h in hosting.history("ep")] == [first.id, first.id, second.id]


def test_concurrent_writers_cannot_both_leave_the_same_status(tmp_path: Path) -> None:
    with StateDB.open(tmp_path) as setup:
        _endpoint(setup.hosting, "ep", "InService")
    won: list[str] = []
    lost: list[str] = []
    barrier = threading.Barrier(8)

    def worker(i: int) -> None:
        with StateDB.open(tmp_path) as mine:  # one connection per thread, as StateDB asks
            barrier.wait()
            try:
                mine.hosting.transition("ep", "Updating", expected="InService", reason=f"writer {i}")
                won.append(f"writer {i}")
            except StaleStatus:
                lost.append(f"writer {i}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(lost) == 7
    with StateDB.open(tmp_path) as check:
        assert [h.reason for h in check.hosting.history("ep")][1:] == won


def test_writes_inside_an_explicit_transaction_roll_back_together(hosting: Hosting) -> None:
    with pytest.raises(RuntimeError), hosting.transaction():
        hosting.create_model("m", _arn("model", "m"), ContainerSpec())
        _endpoint(hosting, "ep")
        raise RuntimeError("abandon")
    assert hosting.get_model("m") is None and hosting.get_endpoint("ep") is None
    assert hosting.history("ep") == []


# ---- instances ---------------------------------------------------------------------------------------------------


def test_an_instance_moves_through_its_states_with_times(hosting: Hosting) -> None:
    added = hosting.add_instance("i-1", "ep", "cfg", "AllTraffic", "ml.m5.large", "Pending")
    assert (added.state, added.port, added.handle, added.started, added.ended) == ("Pending", None, "", None, None)
    with pytest.raises(AlreadyExists):
        hosting.add_instance("i-1", "ep", "cfg", "AllTraffic", "ml.m5.large", "Pending")
    starting = hosting.update_instance("i-1", state="Starting", expected="Pending", port=40123, handle="4242")
    assert (starting.port, starting.handle, starting.started) == (40123, "4242", None)
    healthy = hosting.update_instance("i-1", state="Healthy", expected="Starting", mark_started=True)
    assert healthy.started == healthy.updated
    with pytest.raises(StaleStatus):
        hosting.update_instance("i-1", state="Healthy", expected=("Pending", "Starting"))
    failed = hosting.update_instance("i-1", state="Failed", last_error="exit 137: out of memory", mark_ended=True)
    assert (failed.state, failed.last_error, failed.ended, failed.port) == (
        "Failed",
        "exit 137: out of memory",
        failed.updated,
        40123,
    )
    with pytest.raises(NotFound):
        hosting.update_instance("i-2", state="Healthy")


def test_instances_are_listed_by_endpoint_and_state(hosting: Hosting) -> None:
    for i, (endpoint, state) in enumerate([("a", "Healthy"), ("a", "Failed"), ("b", "Healthy"), ("a", "Starting")]):
        hosting.add_instance(f"i-{i}", endpoint, "cfg", "V", "ml.t2.medium", state)
    assert [r.instance_id for r in hosting.instances("a")] == ["i-0", "i-1", "i-3"]
    assert [r.instance_id for r in hosting.instances("a", states=["Healthy", "Starting"])] == ["i-0", "i-3"]
    assert [r.instance_id for r in hosting.instances(states=["Healthy"])] == ["i-0", "i-2"]
    hosting.delete_instance("i-1")
    with pytest.raises(NotFound):
        hosting.delete_instance("i-1")
    assert len(hosting.instances()) == 3


# ---- listings ----------------------------------------------------------------------------------------------------


def _names(page_items: list[EndpointRow]) -> list[str]:
    return [r.name for r in page_items]


def _all_pages(h: Hosting, **kwargs: object) -> list[str]:
    seen: list[str] = []
    token = None
    while True:
        page = h.list_endpoints(next_token=token, **kwargs)  # type: ignore[arg-type]
        seen += _names(page.items)
        token = page.next_token
        if token is None:
            return seen


def test_list_endpoints_defaults_to_newest_first_ten_a_page(hosting: Hosting) -> None:
    for i in range(12):
        _endpoint(hosting, f"ep-{i:02d}")
    first = hosting.list_endpoints()
    assert _names(first.items) == [f"ep-{i:02d}" for i in range(11, 1, -1)]
    assert first.next_token is not None
    second = hosting.list_endpoints(next_token=first.next_token)
    assert _names(second.items) == ["ep-01", "ep-00"] and second.next_token is None


@pytest.mark.parametrize("sort_by", ["Name", "CreationTime", "Status"])
@pytest.mark.parametrize("sort_order", ["Ascending", "Descending"])
def test_every_sort_pages_through_every_row_once(hosting: Hosting, sort_by: str, sort_order: str) -> None:
    statuses = ["InService", "Creating", "Failed"]
    names = [f"ep-{(i * 7) % 10}" for i in range(10)]  # created out of name order
    for i, name in enumerate(names):
        _endpoint(hosting, name, statuses[i % 3])
    paged = _all_pages(hosting, sort_by=sort_by, sort_order=sort_order, max_results=3)
    whole = _names(hosting.list_endpoints(sort_by=sort_by, sort_order=sort_order, max_results=100).items)
    assert paged == whole and sorted(paged) == sorted(names)
    rows = {r.name: r for r in hosting.all_endpoints()}
    key = {"Name": lambda n: n, "CreationTime": lambda n: rows[n].created, "Status": lambda n: rows[n].status}[sort_by]
    assert [key(n) for n in paged] == sorted((key(n) for n in paged), reverse=sort_order == "Descending")


def test_pages_are_stable_while_rows_are_inserted(hosting: Hosting) -> None:
    for i in range(6):
        _endpoint(hosting, f"old-{i}")
    first = hosting.list_endpoints(sort_by="CreationTime", sort_order="Descending", max_results=2)
    assert _names(first.items) == ["old-5", "old-4"]
    for i in range(5):  # newer rows land before the cut: no row of the old listing repeats or goes missing
        _endpoint(hosting, f"new-{i}")
    rest: list[str] = []
    token = first.next_token
    while token is not None:
        page = hosting.list_endpoints(sort_by="CreationTime", sort_order="Descending", max_results=2, next_token=token)
        rest += _names(page.items)
        token = page.next_token
    assert rest == ["old-3", "old-2", "old-1", "old-0"]


def test_pages_by_name_take_rows_inserted_after_the_cut_and_skip_those_before(hosting: Hosting) -> None:
    for name in ["b", "d", "f", "h"]:
        _endpoint(hosting, name)
    first = hosting.list_endpoints(sort_by="Name", sort_order="Ascending", max_results=2)
    assert _names(first.items) == ["b", "d"]
    _endpoint(hosting, "a")  # before the cut: not on a later page
    _endpoint(hosting, "e")  # after it: on a later page, in its place
    second = hosting.list_endpoints(sort_by="Name", sort_order="Ascending", max_results=10, next_token=first.next_token)
    assert _names(second.items) == ["e", "f", "h"]


def test_equal_creation_times_page_without_loss(db: StateDB) -> None:
    frozen = Hosting(db.conn, clock=lambda: 5.0)
    for i in range(7):
        _endpoint(frozen, f"ep-{i}")
    assert sorted(_all_pages(frozen, max_results=2)) == [f"ep-{i}" for i in range(7)]


def test_list_filters(hosting: Hosting) -> None:
    _endpoint(hosting, "Prod-Fraud", "InService")  # created at 1001
    _endpoint(hosting, "staging-fraud", "Creating")  # 1002
    _endpoint(hosting, "prod-churn", "InService")  # 1003
    assert _all_pages(hosting, name_contains="FRAUD", sort_by="Name", sort_order="Ascending") == [
        "Prod-Fraud",
        "staging-fraud",
    ]
    assert _all_pages(hosting, status_equals="InService") == ["prod-churn", "Prod-Fraud"]
    assert _all_pages(hosting, creation_time_after=1001.0, creation_time_before=1003.0) == ["staging-fraud"]
    hosting.transition("Prod-Fraud", "Updating", expected="InService")  # last modified 1004
    assert _all_pages(hosting, last_modified_time_after=1003.5) == ["Prod-Fraud"]
    assert _all_pages(hosting, last_modified_time_before=1003.5) == ["prod-churn", "staging-fraud"]
    assert _all_pages(hosting, name_contains="%") == []  # no wildcard semantics


def test_models_and_configs_list_the_same_way(hosting: Hosting) -> None:
    for name in ["m-a", "m-b", "x-c"]:
        hosting.create_model(name, _arn("model", name), ContainerSpec())
        hosting.create_endpoint_config(name, _arn("endpoint-config", name), [])
    page = hosting.list_models(name_contains="m-", sort_by="Name", sort_order="Ascending", max_results=1)
    assert [m.name for m in page.items] == ["m-a"]
    page = hosting.list_models(name_contains="m-", sort_by="Name", sort_order="Ascending", next_token=page.next_token)
    assert [m.name for m in page.items] == ["m-b"] and page.next_token is None
    configs = hosting.list_endpoint_configs(creation_time_after=1003.0)  # configs: 1002, 1004, 1006
    assert [c.name for c in configs.items] == ["x-c", "m-b"]
    with pytest.raises(ValueError, match="SortBy"):
        hosting.list_models(sort_by="Status")  # models have no status


def test_a_token_from_another_listing_or_garbage_is_refused(hosting: Hosting) -> None:
    for i in range(3):
        _endpoint(hosting, f"ep-{i}")
    token = hosting.list_endpoints(max_results=1).next_token
    assert token is not None
    with pytest.raises(InvalidNextToken):
        hosting.list_endpoints(max_results=1, next_token=token, sort_by="Name")
    with pytest.raises(InvalidNextToken):
        hosting.list_endpoints(max_results=1, next_token=token, status_equals="Failed")
    for garbage in ["", "!!!", "bm90IGpzb24", "eyJrIjogMX0"]:  # not base64, not JSON, a JSON without fields
        with pytest.raises(InvalidNextToken):
            hosting.list_endpoints(next_token=garbage)
    assert len(hosting.list_endpoints(max_results=5, next_token=token).items) == 2  # page size may change


def test_bad_sort_and_sizes_are_refused(hosting: Hosting) -> None:
    with pytest.raises(ValueError, match="SortOrder"):
        hosting.list_endpoints(sort_order="Sideways")
    with pytest.raises(ValueError, match="MaxResults"):
        hosting.list_endpoints(max_results=0)
