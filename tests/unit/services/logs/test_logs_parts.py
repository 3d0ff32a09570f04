"""The small parts of CloudWatch Logs: filter patterns, line times, retention settings, and the store's sizes."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from servekit.services.database import StateDB
from servekit.services.logs.lines import MAX_EVENT_CHARS, LineTimes, split_lines
from servekit.services.logs.patterns import PatternError, parse
from servekit.services.logs.retention import RetentionLimits, parse_bytes
from servekit.services.logs.store import EVENT_OVERHEAD, Logs, StreamBatch

NOW_MS = 1_700_000_000_000


def test_patterns() -> None:
    assert parse("").matches("anything") and parse('""').matches("anything")
    p = parse('ERROR "disk full" ?a ?b -ignore')
    assert p.required == ("ERROR", "disk full") and p.any_of == ("a", "b") and p.excluded == ("ignore",)
    assert p.matches("ERROR: disk full on a") and not p.matches("ERROR: disk full")
    assert not p.matches("ERROR: disk full on a, ignore")
    assert parse("%err(or)?\\s+\\d%").matches("an error 5")
    assert parse('"say \\"hi\\""').required == ('say "hi"',)
    for bad in ("{ $.a = 1 }", "[ip, user]", "%(%"):
        with pytest.raises(PatternError):
            parse(bad)


def test_line_times() -> None:
    times = LineTimes()
    utc = int(datetime(2023, 11, 14, 22, 13, 10, tzinfo=UTC).timestamp() * 1000)
    assert times.of("2023-11-14T22:13:10Z x", NOW_MS) == utc
    assert times.of("2023-11-14T22:13:10.5+00:00 x", NOW_MS) == utc + 500
    assert times.of("[2023-11-14 23:13:10,123 +01:00] x", NOW_MS) == utc + 123
    local = int(datetime(2023, 11, 14, 22, 13, 10).astimezone().timestamp() * 1000)
    assert times.of("2023-11-14 22:13:10,001 INFO x", NOW_MS) == local + 1  # Python logging: local time
    assert times.of("no time here", NOW_MS) == NOW_MS
    assert times.of("2020-01-01T00:00:00Z long ago", NOW_MS) == NOW_MS  # beyond what CloudWatch takes
    assert times.of("2023-11-14T22:13:10Zsuffix", NOW_MS) == NOW_MS  # not a time followed by text
    long = "x" * (MAX_EVENT_CHARS + 10)
    events = split_lines(f"a\r\n\n{long}\n".encode(), times, NOW_MS)
    assert [len(m) for _, m in events] == [1, MAX_EVENT_CHARS, 10]
    assert split_lines(b"caf\xc3\xa9 \xff\n", times, NOW_MS) == [(NOW_MS, "café \ufffd")]


def test_retention_settings_from_the_environment() -> None:
    assert RetentionLimits.from_env({}) == RetentionLimits()
    env = {"SERVEKIT_LOGS_MAX_BYTES": "512M", "SERVEKIT_LOGS_MAX_AGE_DAYS": "0"}
    limits = RetentionLimits.from_env({**env, "SERVEKIT_LOGS_RETENTION_INTERVAL_S": "5"})
    assert limits == RetentionLimits(max_bytes=512 * 2**20, max_age_days=None, interval_s=5.0)
    assert parse_bytes("2GiB") == 2 * 2**30 and parse_bytes("1000") == 1000 and parse_bytes("1.5k") == 1536
    with pytest.raises(ValueError, match="SERVEKIT_LOGS_MAX_BYTES"):
        RetentionLimits.from_env({"SERVEKIT_LOGS_MAX_BYTES": "lots"})
    with pytest.raises(ValueError, match="SERVEKIT_LOGS_MAX_AGE_DAYS"):
        RetentionLimits.from_env({"SERVEKIT_LOGS_MAX_AGE_DAYS": "-1"})


def test_the_store_counts_sizes_as_cloudwatch_does_and_deletes_with_the_group(tmp_path: Path) -> None:
    with StateDB.open(tmp_path) as db:
        repo = Logs(db.conn, lambda: NOW_MS / 1000)
        stored = repo.put([StreamBatch("g", "a", [(NOW_MS, "abc"), (NOW_MS, "de")]), StreamBatch("g", "b", [])])
        assert stored == {("g", "a"): 2}
        group = repo.group("g")
        assert group is not None and group.stored_bytes == 5 + 2 * EVENT_OVERHEAD
        assert repo.stream("g", "b") is not None  # an empty batch still makes its stream
        with pytest.raises(LookupError):
            repo.put([StreamBatch("g", "missing", [(NOW_MS, "x")])], create=False)
        assert repo.count() == 2
        assert repo.delete_group("g") and repo.count() == 0 and repo.stream("g", "a") is None
        assert not repo.delete_group("g")


def test_size_retention_drops_the_oldest_ingested_first(tmp_path: Path) -> None:
    with StateDB.open(tmp_path) as db:
        repo = Logs(db.conn, lambda: NOW_MS / 1000)
        repo.put([StreamBatch("g", "old", [(NOW_MS, f"{i:04d}") for i in range(100)])])
        repo.put([StreamBatch("h", "new", [(NOW_MS - 1000, f"{i:04d}") for i in range(100)])])
        per_event = 4 + EVENT_OVERHEAD
        assert repo.prune(max_bytes=150 * per_event, chunk=7) == 50
        old, new = repo.stream("g", "old"), repo.stream("h", "new")
        assert old is not None and new is not None
        assert [e.message for e in repo.read(old.seq)] == [f"{i:04d}" for i in range(50, 100)]
        assert old.stored_bytes == 50 * per_event and new.stored_bytes == 100 * per_event
        assert repo.prune(max_age_days=None, max_bytes=None) == 0
