"""The monitor reads its sources through the storage API (here the in-memory fake)."""

from __future__ import annotations

import pytest

from servekit.services.monitoring.stream.sources import SourceError, read
from servekit.testing import InMemoryStorage


def test_monitor_reads_sources_through_storage() -> None:
    s = InMemoryStorage()
    s.put("mem://data/part-1.csv", b"x,y\n1,a\n2,b\n")
    s.put("mem://data/_tmp.csv", b"x,y\n9,z\n")  # names starting with _ or . are skipped
    batches = list(read("mem://data", storage=s))
    assert [b.table.to_pydict() for b in batches] == [{"x": ["1", "2"], "y": ["a", "b"]}]
    with pytest.raises(SourceError, match="does not exist"):
        list(read("mem://nothing", storage=s))
