"""Triggers: the cron parser and what is due (pure, clock injected), and data-arrival watchers over real folders,
real step processes and real SQLite — restarted and concurrent watchers start each partition exactly once."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from servekit.services.database import StateDB
from servekit.services.pipelines.cron import last_fire, next_fire, parse_cron
from servekit.services.pipelines.definition.loading import load_pipeline
from servekit.services.pipelines.engine.runner import PipelineRunner
from servekit.services.pipelines.errors import PipelineError
from servekit.services.pipelines.triggers import TriggerRunner, Watch, due_fire, ready_partitions, schedule, watch
from servekit.storage import Storage

SAMPLES = Path(__file__).with_name("sample_pipelines.py")
PARTITIONED = f"{SAMPLES}:partitioned"
UTC = dt.UTC


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


# ---- cron ---------------------------------------------------------------------------------------------------------


def test_cron_fields_steps_ranges_lists_and_names() -> None:
    c = parse_cron("*/15 9-17 * * mon-fri")
    assert sorted(c.minutes) == [0, 15, 30, 45] and sorted(c.hours) == list(range(9, 18))
    assert c.weekdays == frozenset({1, 2, 3, 4, 5})
    # Friday 2026-01-02 17:50 -> Monday 09:00
    assert next_fire(c, at("2026-01-02T17:50:00")) == at("2026-01-05T09:00:00")
    assert next_fire(c, at("2026-01-05T09:00:00")) == at("2026-01-05T09:15:00")  # strictly after
    assert last_fire(c, at("2026-01-05T09:14:59")) == at("2026-01-05T09:00:00")
    assert last_fire(c, at("2026-01-04T12:00:00")) == at("2026-01-02T17:45:00")  # back over the weekend
    assert parse_cron("0 0 * * 7").weekdays == frozenset({0})  # 7 is Sunday too
    assert sorted(parse_cron("5,10-12 0 1 jan,JUL *").months) == [1, 7]
    assert sorted(parse_cron("5/20 * * * *").minutes) == [5, 25, 45]


def test_cron_day_of_month_or_day_of_week_when_both_restricted() -> None:
    c = parse_cron("0 0 13 * fri")  # the 13th, or any Friday
    assert next_fire(c, at("2026-02-01T00:00:00")) == at("2026-02-06T00:00:00")  # a Friday, not the 13th
    assert next_fire(c, at("2026-02-06T00:00:00")) == at("2026-02-13T00:00:00")  # the 13th (a Friday too)
    assert next_fire(parse_cron("0 0 29 2 *"), at("2026-03-01T00:00:00")) == at("2028-02-29T00:00:00")


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("* * * *", "five fields"),
        ("60 * * * *", "minute '60' must lie within 0-59"),
        ("* 1-0 * * *", "hour '1-0' must lie within 0-23"),
        ("*/0 * * * *", "step '0' must be a positive number"),
        ("* * * foo *", "month 'foo' is not a number or a name"),
        ("0 0 31 2 *", "never fires"),
    ],
)
def test_bad_cron_expressions_say_what_is_expected(expression: str, expected: str) -> None:
    with pytest.raises(PipelineError, match=expected.replace("(", r"\(")):
        parse_cron(expression)


def test_only_the_newest_missed_fire_is_due() -> None:
    c = parse_cron("0 * * * *")
    assert due_fire(c, None, at("2026-01-01T05:30:00")) == at("2026-01-01T05:00:00")
    assert due_fire(c, at("2026-01-01T02:10:00"), at("2026-01-01T05:30:00")) == at("2026-01-01T05:00:00")
    assert due_fire(c, at("2026-01-01T05:00:00"), at("2026-01-01T05:59:59")) is None


# ---- data arrival -------------------------------------------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def db(home: Path) -> Iterator[StateDB]:
    with StateDB.open(home) as d:
        yield d


def partition(prefix: Path, name: str, rows: int, *, done: bool = True) -> Path:
    p = prefix / name
    p.mkdir(parents=True)
    (p / "part-0.csv").write_text("".join(f"{i}\n" for i in range(rows)))
    if done:
        (p / "_SUCCESS").touch()
    return p


def trigger(db: StateDB, home: Path, root: Path) -> TriggerRunner:
    runner = PipelineRunner(db, home=home)
    return TriggerRunner(runner, load_pipeline(PARTITIONED), PARTITIONED, artifact_root=str(root))


def test_ready_partitions_with_and_without_a_marker(tmp_path: Path) -> None:
    prefix = tmp_path / "landing"
    partition(prefix, "day=2", 1)
    partition(prefix, "day=1", 1)
    partition(prefix, "day=3", 1, done=False)
    (prefix / "day=4").mkdir()  # empty: not a partition yet, marker or not
    storage = Storage()
    assert ready_partitions(storage, Watch(str(prefix), "_SUCCESS")) == ["day=1", "day=2"]
    assert ready_partitions(storage, Watch(str(prefix))) == ["day=1", "day=2", "day=3"]
    assert ready_partitions(storage, Watch(str(tmp_path / "nothing-yet"), "_SUCCESS")) == []
    with pytest.raises(PipelineError, match="file name such as _SUCCESS"):
        Watch(str(prefix), "a/b")


def test_ready_partitions_under_an_fsspec_uri() -> None:
    storage = Storage()
    storage.put("memory://triggers-landing/day=1/part.csv", b"1\n")
    storage.put("memory://triggers-landing/day=1/_SUCCESS", b"")
    storage.put("memory://triggers-landing/day=2/part.csv", b"1\n")
    assert ready_partitions(storage, Watch("memory://triggers-landing", "_SUCCESS")) == ["day=1"]
    assert ready_partitions(storage, Watch("memory://triggers-landing")) == ["day=1", "day=2"]


def test_a_restarted_watcher_never_starts_a_partition_twice(db: StateDB, home: Path, tmp_path: Path) -> None:
    prefix, root = tmp_path / "landing", tmp_path / "artifacts"
    partition(prefix, "day=1", 3)
    partition(prefix, "day=2", 5)
    partition(prefix, "day=3", 7, done=False)  # still being written
    spec = Watch(str(prefix), "_SUCCESS")
    first = watch(trigger(db, home, root), spec, Storage(), every_s=1, once=True)
    assert [(s.key, str(s.result.status)) for s in first] == [("day=1", "Succeeded"), ("day=2", "Succeeded")]
    assert [(s.result.steps["count"].properties or {})["Properties"]["rows"] for s in first] == [3, 5]

    again = watch(trigger(db, home, root), spec, Storage(), every_s=1, once=True)  # a restart: same partitions
    assert again == []
    (prefix / "day=3" / "_SUCCESS").touch()
    third = watch(trigger(db, home, root), spec, Storage(), every_s=1, until_idle=True, sleep=lambda _: None)
    assert [s.key for s in third] == ["day=3"]
    runs = db.pipelines.list_runs(pipeline="partitioned").items
    assert sorted(r.parameters["Partition"] for r in runs) == [str(prefix / f"day={i}") for i in (1, 2, 3)]
    claims = db.pipelines.claims("partitioned", spec.trigger)
    assert sorted((c.key, c.run_id) for c in claims) == sorted((s.key, s.result.run_id) for s in first + third)


def test_a_watcher_needs_a_parameter_for_the_partition(db: StateDB, home: Path, tmp_path: Path) -> None:
    spec = Watch(str(tmp_path), "_SUCCESS", parameter="InputUri")
    with pytest.raises(PipelineError, match=r"no parameter 'InputUri'.*--partition-param"):
        watch(trigger(db, home, tmp_path / "a"), spec, Storage(), every_s=1, once=True)


def test_two_watchers_at_once_start_each_partition_once(home: Path, tmp_path: Path) -> None:
    prefix, root = tmp_path / "landing", tmp_path / "artifacts"
    for i in range(4):
        partition(prefix, f"hour={i:02d}", i + 1)
    argv = [
        sys.executable,
        "-m",
        "servekit.cli.main",
        "pipeline",
        "watch",
        PARTITIONED,
        "--prefix",
        str(prefix),
        "--marker",
        "_SUCCESS",
        "--every",
        "0.2s",
        "--until-idle",
        "--home",
        str(home),
        "--artifact-root",
        str(root),
        "--json",
    ]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    started = [json.loads(line) for out, _ in outs for line in out.splitlines()]
    assert sorted(s["Partition"] for s in started) == [f"hour={i:02d}" for i in range(4)]
    assert all(s["PipelineExecutionStatus"] == "Succeeded" for s in started)
    with StateDB.open(home) as db:
        runs = db.pipelines.list_runs(pipeline="partitioned").items
        assert len(runs) == 4
        rows = {r.parameters["Partition"]: db.pipelines.steps(r.run_id)[0].properties for r in runs}
    assert {Path(k).name: v["Properties"]["rows"] for k, v in rows.items() if v} == {
        f"hour={i:02d}": i + 1 for i in range(4)
    }


# ---- schedule -----------------------------------------------------------------------------------------------------


class FakeClock:
    def __init__(self, start: dt.datetime) -> None:
        self.t = start
        self.slept: list[float] = []

    def now(self) -> dt.datetime:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += dt.timedelta(seconds=seconds)


def test_a_schedule_runs_at_each_fire_and_a_fire_starts_one_run(db: StateDB, home: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    partition(data, "fixed", 2)
    t = TriggerRunner(
        PipelineRunner(db, home=home),
        load_pipeline(PARTITIONED),
        PARTITIONED,
        artifact_root=str(tmp_path / "artifacts"),
        parameters={"Partition": str(data / "fixed")},
    )
    clock = FakeClock(at("2026-01-01T00:03:20"))
    cron = parse_cron("*/5 * * * *")
    runs = schedule(t, cron, now=clock.now, sleep=clock.sleep, max_runs=2)
    assert [s.key for s in runs] == ["2026-01-01T00:05:00+00:00", "2026-01-01T00:10:00+00:00"]
    # to 00:05, then to 00:10, re-reading the clock every minute at least (runs take no fake time)
    assert clock.slept == [60.0, 40.0, 60.0, 60.0, 60.0, 60.0, 60.0]
    assert all(str(s.result.status) == "Succeeded" for s in runs)
    # --once: the newest fire at or before now, unless a scheduler already ran it
    assert schedule(t, cron, now=clock.now, sleep=clock.sleep, once=True) == []
    clock.t = at("2026-01-01T00:16:00")
    [late] = schedule(t, cron, now=clock.now, sleep=clock.sleep, once=True)
    assert late.key == "2026-01-01T00:15:00+00:00"


def test_a_claim_is_taken_once_across_connections(home: Path) -> None:
    """Two processes' connections claim the same partition: the second gets AlreadyClaimed and creates no run."""
    from servekit.services.pipelines.runs.repo import AlreadyClaimed, Claim

    def create(db: StateDB, run_id: str) -> None:
        db.pipelines.create_run(
            run_id=run_id,
            pipeline="p",
            arn=f"arn:{run_id}",
            source="s",
            definition={},
            parameters={},
            artifact_root="/a",
            status="Executing",
            owner_pid=1,
            owner_host="h",
            claim=Claim("watch:/data", "day=1"),
        )

    with StateDB.open(home) as a, StateDB.open(home) as b:
        create(a, "run-a")
        with pytest.raises(AlreadyClaimed, match="watch:/data day=1 started run run-a"):
            create(b, "run-b")
        assert b.pipelines.get_run("run-b") is None
        assert [(c.key, c.run_id) for c in b.pipelines.claims("p", "watch:/data")] == [("day=1", "run-a")]


def test_schedule_once_through_the_cli_starts_a_fire_once(home: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    partition(data, "fixed", 3)
    argv = [sys.executable, "-m", "servekit.cli.main", "pipeline", "schedule", PARTITIONED, "--once", "--json"]
    # the newest fire of "0 0 1 1 *" is this year's 1 January: the same for both calls
    argv += ["--cron", "0 0 1 1 *", "--home", str(home), "--param", f"Partition={data / 'fixed'}"]
    first = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    [started] = [json.loads(line) for line in first.stdout.splitlines()]
    assert started["Fire"].endswith("-01-01T00:00:00+00:00") and started["PipelineExecutionStatus"] == "Succeeded"
    again = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and again.stdout == "", again.stderr
    bad_cron = [a if a != "0 0 1 1 *" else "61 * * * *" for a in argv]
    bad = subprocess.run(bad_cron, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "minute '61' must lie within 0-59" in bad.stderr
