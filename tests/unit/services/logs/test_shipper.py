"""The shipper on real files and a real SQLite state, with an injected clock: registered and announced files into
their streams, whole lines with their own times, durable offsets (a restart neither repeats nor loses a line),
replaced files, lingering sources, retention, and the background loop's last pass on close."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from servekit.services.database import StateDB
from servekit.services.logs.retention import RetentionLimits
from servekit.services.logs.shipper import TRAINING_GROUP, TRANSFORM_GROUP, LogShipper, LogSource, endpoint_group
from servekit.services.logs.store import Logs

T0 = 1_700_000_000.0
NO_RETENTION = RetentionLimits(max_bytes=None, max_age_days=None)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def repo(home: Path, clock: Clock) -> Iterator[Logs]:
    db = StateDB.open(home)
    yield Logs(db.conn, clock)
    db.close()


def messages(repo: Logs, group: str, stream: str) -> list[str]:
    row = repo.stream(group, stream)
    assert row is not None, f"no stream {group} {stream}"
    return [e.message for e in repo.read(row.seq)]


def append(path: Path, text: str) -> None:
    with path.open("a") as f:
        f.write(text)


def test_a_registered_file_ships_whole_lines_each_with_its_time(repo: Logs, clock: Clock, tmp_path: Path) -> None:
    out = tmp_path / "algo-1.log"
    shipper = LogShipper(repo, retention=NO_RETENTION)
    shipper.register(TRAINING_GROUP, "job/algo-1-1700000000", out)  # before the file exists
    shipper.ship_once()
    assert repo.group(TRAINING_GROUP) is None
    append(out, "2023-11-14T22:13:10.250Z epoch 1\nplain line\n\nhalf a li")
    shipper.ship_once()
    row = repo.stream(TRAINING_GROUP, "job/algo-1-1700000000")
    assert row is not None
    events = repo.read(row.seq)
    assert [(e.timestamp, e.message) for e in events] == [
        (1_699_999_990_250, "2023-11-14T22:13:10.250Z epoch 1"),  # its own time
        (int(T0 * 1000), "plain line"),  # the time it was read
    ]
    append(out, "ne\n")
    shipper.ship_once()
    assert messages(repo, TRAINING_GROUP, "job/algo-1-1700000000")[-1] == "half a line"


def test_a_restart_resumes_where_the_stored_events_end(home: Path, clock: Clock, tmp_path: Path) -> None:
    out = tmp_path / "job.log"
    append(out, "".join(f"line {i}\n" for i in range(100)))
    with StateDB.open(home) as db:
        first = LogShipper(Logs(db.conn, clock), retention=NO_RETENTION)
        first.register(TRANSFORM_GROUP, "job/i-1", out)
        first.ship_once()
        append(out, "".join(f"line {i}\n" for i in range(100, 150)))  # written while the plane is down
    with StateDB.open(home) as db:  # a new process: nothing but the state carries over
        repo = Logs(db.conn, clock)
        second = LogShipper(repo, retention=NO_RETENTION)
        second.register(TRANSFORM_GROUP, "job/i-1", out)
        second.ship_once()
        second.ship_once()
        assert messages(repo, TRANSFORM_GROUP, "job/i-1") == [f"line {i}" for i in range(150)]


def test_offsets_and_events_are_one_transaction(repo: Logs, clock: Clock, tmp_path: Path) -> None:
    out = tmp_path / "x.log"
    append(out, "a\nb\n")
    shipper = LogShipper(repo, retention=NO_RETENTION)
    shipper.register("g", "s", out)

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the database went away")

    real = repo.put
    repo.put = broken  # type: ignore[method-assign,assignment]
    with pytest.raises(RuntimeError):
        shipper.ship_once()
    repo.put = real  # type: ignore[method-assign]
    restarted = LogShipper(repo, retention=NO_RETENTION)  # the failed pass stored neither events nor offsets
    restarted.register("g", "s", out)
    restarted.ship_once()
    assert messages(repo, "g", "s") == ["a", "b"]
    offset = repo.offset(str(out))
    assert offset is not None and offset.position == 4


def test_a_replaced_or_truncated_file_is_read_from_its_start(repo: Logs, tmp_path: Path) -> None:
    out = tmp_path / "x.log"
    append(out, "one\ntwo\n")
    shipper = LogShipper(repo, retention=NO_RETENTION)
    shipper.register("g", "s", out)
    shipper.ship_once()
    out.unlink()
    append(out, "three\n")  # a new file under the same name (another inode)
    shipper.ship_once()
    out.write_text("")  # truncated in place
    append(out, "four\n")
    shipper.ship_once()
    assert messages(repo, "g", "s") == ["one", "two", "three", "four"]


def test_an_unannounced_source_lingers_then_is_let_go(repo: Logs, clock: Clock, tmp_path: Path) -> None:
    out = tmp_path / "ep-AllTraffic-1.log"
    live = [LogSource(endpoint_group("ep"), "AllTraffic/ep-AllTraffic-1", str(out))]
    shipper = LogShipper(repo, [lambda: list(live)], linger_s=5.0, retention=NO_RETENTION)
    append(out, "serving\n")
    shipper.ship_once()
    live.clear()  # the instance was stopped; it still writes while it stops
    append(out, "stopping\nbye")
    clock.now += 1
    shipper.ship_once()  # whole lines only while it may still write
    assert messages(repo, "/aws/sagemaker/Endpoints/ep", "AllTraffic/ep-AllTraffic-1") == ["serving", "stopping"]
    assert [r.path for r in repo.followed()] == [str(out)]
    clock.now += 5
    shipper.ship_once()  # quiet for linger_s: read to its end, last partial line too, and let go
    assert messages(repo, "/aws/sagemaker/Endpoints/ep", "AllTraffic/ep-AllTraffic-1")[-1] == "bye"
    assert repo.followed() == []
    append(out, "a new instance with the same id appends\n")
    live.append(LogSource(endpoint_group("ep"), "AllTraffic/ep-AllTraffic-1", str(out)))
    shipper.ship_once()
    assert messages(repo, "/aws/sagemaker/Endpoints/ep", "AllTraffic/ep-AllTraffic-1") == [
        "serving", "stopping", "bye", "a new instance with the same id appends",
    ]  # fmt: skip


def test_a_pass_reads_at_most_read_bytes_and_says_it_is_behind(repo: Logs, tmp_path: Path) -> None:
    out = tmp_path / "busy.log"
    append(out, "".join(f"{i:09d}\n" for i in range(5000)))  # 50,000 bytes
    shipper = LogShipper(repo, read_bytes=16_384, retention=NO_RETENTION)
    shipper.register("g", "s", out)
    passes = 1
    while shipper.ship_once():
        passes += 1
    assert passes == 4
    assert messages(repo, "g", "s") == [f"{i:09d}" for i in range(5000)]


def test_the_loop_enforces_retention_by_size_and_age(repo: Logs, clock: Clock, tmp_path: Path) -> None:
    out = tmp_path / "x.log"
    limits = RetentionLimits(max_bytes=10 * (26 + 9), max_age_days=1, interval_s=60)
    shipper = LogShipper(repo, retention=limits)
    shipper.register("g", "s", out)
    append(out, "".join(f"line {i:04d}\n" for i in range(30)))
    shipper.ship_once()
    assert messages(repo, "g", "s") == [f"line {i:04d}" for i in range(20, 30)]  # the newest 10 fit
    assert repo.stored_bytes() == 10 * (26 + 9)
    clock.now += 86_400 + 61  # a day on: every event is past the age limit
    shipper.ship_once()
    assert messages(repo, "g", "s") == []
    assert repo.stored_bytes() == 0


def test_the_background_loop_ships_and_its_close_reads_every_file_to_its_end(repo: Logs, tmp_path: Path) -> None:
    out = tmp_path / "x.log"
    append(out, "first\nlast, without a newline")

    async def scenario() -> None:
        shipper = LogShipper(repo, interval_s=3600, retention=NO_RETENTION)
        shipper.register("g", "s", os.fspath(out))
        shipper.start()
        await shipper.close()

    asyncio.run(scenario())
    assert messages(repo, "g", "s") == ["first", "last, without a newline"]


def test_a_failing_provider_does_not_stop_the_others(repo: Logs, tmp_path: Path) -> None:
    out = tmp_path / "x.log"
    append(out, "ok\n")

    def broken() -> list[LogSource]:
        raise RuntimeError("boom")

    shipper = LogShipper(repo, [broken, lambda: [LogSource("g", "s", str(out))]], retention=NO_RETENTION)
    shipper.ship_once()
    assert messages(repo, "g", "s") == ["ok"]
