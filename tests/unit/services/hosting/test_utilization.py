"""Instance utilization from /proc counters: parsing, the process tree, the percent computations, and the sampler
on a fake /proc tree with manual clocks (what it records, what Prometheus sees, instances that leave)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from servekit._utils.processes import rss_bytes
from servekit.services.cloudwatch.source import MetricQuery
from servekit.services.cloudwatch.store import INSTANCE_NAMESPACE, MetricsStore
from servekit.services.database import StateDB
from servekit.services.hosting.utilization import (
    InstanceRef,
    Proc,
    UtilizationSampler,
    cpu_percent,
    memory_percent,
    stat_ticks,
    status_rss_bytes,
)

T0 = 1_000_000 * 60
TICKS = 100


def stat_line(pid: int, comm: str, utime: int, stime: int, cutime: int = 0, cstime: int = 0) -> str:
    # the fields of proc(5) after the command name, most of them irrelevant here
    after = ["S", "1", str(pid), str(pid), "0", "-1", "4194304", "10", "0", "0", "0"]
    after += [str(utime), str(stime), str(cutime), str(cstime), "20", "0", "3", "0", "12345"]
    return f"{pid} ({comm}) {' '.join(after)}\n"


class FakeProc:
    """A /proc tree under a folder: processes with CPU ticks, resident memory and children."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "meminfo").parent.mkdir(parents=True, exist_ok=True)
        (root / "meminfo").write_text("MemTotal:       16384000 kB\nMemFree:         1000 kB\n")

    def process(self, pid: int, ticks: tuple[int, int, int, int], rss_kib: int | None, children: list[int]) -> None:
        d = self.root / str(pid)
        (d / "task" / str(pid)).mkdir(parents=True, exist_ok=True)
        (d / "stat").write_text(stat_line(pid, "servekit (serve) x", *ticks))
        rss = f"VmRSS:\t{rss_kib} kB\n" if rss_kib is not None else ""
        (d / "status").write_text(f"Name:\tpython\nState:\tS\n{rss}Threads:\t4\n")
        (d / "task" / str(pid) / "children").write_text(" ".join(map(str, children)) + (" " if children else ""))

    def gone(self, pid: int) -> None:
        for f in sorted((self.root / str(pid)).rglob("*"), reverse=True):
            f.unlink() if f.is_file() else f.rmdir()
        (self.root / str(pid)).rmdir()


@pytest.fixture
def fake(tmp_path: Path) -> FakeProc:
    return FakeProc(tmp_path / "proc")


@pytest.fixture
def db(tmp_path: Path) -> Iterator[StateDB]:
    with StateDB.open(tmp_path / "home") as d:
        yield d


def test_stat_parsing_survives_odd_command_names() -> None:
    assert stat_ticks(stat_line(7, "a) (b", 10, 20, 3, 4)) == 37
    assert stat_ticks("garbage") is None
    assert stat_ticks(None) is None
    assert status_rss_bytes("Name:\tx\nVmRSS:\t  2048 kB\n") == 2048 * 1024
    assert status_rss_bytes("Name:\tzombie\n") == 0
    assert status_rss_bytes(None) is None


def test_percent_computations() -> None:
    assert cpu_percent(10.0, 100.0, 13.0, 102.0) == 150.0  # 3 CPU seconds in 2 s: one and a half cores
    assert cpu_percent(10.0, 100.0, 10.0, 100.0) is None  # no time between the samples
    assert cpu_percent(10.0, 100.0, 9.0, 101.0) == 0.0  # counters never run backwards; never negative
    assert memory_percent(512, 2048, 4096) == 25.0
    assert memory_percent(512, None, 4096) == 12.5  # no envelope memory: the machine's
    assert memory_percent(512, None, None) is None


def test_the_tree_sums_children_and_skips_ones_that_vanished(fake: FakeProc) -> None:
    fake.process(100, (100, 50, 30, 20), 1000, [101, 102])
    fake.process(101, (200, 100, 0, 0), 500, [103])
    fake.process(103, (5, 5, 0, 0), None, [])  # a zombie: no VmRSS
    proc = Proc(fake.root, ticks_per_s=TICKS)  # 102 is listed as a child but already gone
    assert sorted(proc.tree(100)) == [100, 101, 102, 103]
    assert proc.cpu_seconds(100) == pytest.approx((200 + 300 + 10) / TICKS)
    assert proc.rss_bytes(100) == 1500 * 1024
    assert proc.cpu_seconds(999) is None and proc.rss_bytes(999) is None
    assert proc.machine_memory_bytes() == 16384000 * 1024


def test_the_real_proc_of_this_process() -> None:
    proc = Proc()
    cpu = proc.cpu_seconds(os.getpid())
    rss = proc.rss_bytes(os.getpid())
    assert cpu is not None and cpu > 0
    assert rss is not None and rss == pytest.approx(rss_bytes(os.getpid()), rel=0.2)


def test_sampler_records_cpu_memory_and_disk_per_instance(fake: FakeProc, db: StateDB, tmp_path: Path) -> None:
    instances = [
        InstanceRef("ep", "A", "cfg", "ep-A-1", 100, 2, 1000 * 1024 * 4),  # 4000 KiB envelope
        InstanceRef("ep", "A", "cfg", "ep-A-2", 200, 2, None),  # no envelope memory
    ]
    fake.process(100, (0, 0, 0, 0), 1000, [101])
    fake.process(101, (0, 0, 0, 0), 1000, [])
    fake.process(200, (0, 0, 0, 0), 16384, [])
    clock, mono = [float(T0)], [50.0]
    store = MetricsStore(db.metrics, lambda: clock[0], resolution_s=1)
    sampler = UtilizationSampler(
        lambda: list(instances),
        store,
        proc=Proc(fake.root, ticks_per_s=TICKS),
        disk_path=tmp_path,
        clock=lambda: clock[0],
        monotonic=lambda: mono[0],
    )
    assert sampler.interval_s == 1.0
    first = sampler.sample()
    assert [s.cpu_percent for s in first] == [None, None]  # no interval yet
    assert first[0].memory_percent == pytest.approx(2000 / 4000 * 100)
    assert first[1].memory_percent == pytest.approx(16384 / 16384000 * 100)

    # two seconds later: instance 1's tree used 3 s of CPU (1.5 cores), instance 2 half a second
    fake.process(100, (100, 50, 0, 0), 1000, [101])
    fake.process(101, (100, 50, 0, 0), 3000, [])
    fake.process(200, (25, 25, 0, 0), 16384, [])
    clock[0], mono[0] = T0 + 2, 52.0
    second = sampler.sample()
    assert [s.cpu_percent for s in second] == [pytest.approx(150.0), pytest.approx(25.0)]

    dims = (("EndpointName", "ep"), ("VariantName", "A"))
    avg = store.datapoints(MetricQuery(INSTANCE_NAMESPACE, "CPUUtilization", dims, 1, "Average"), T0, T0 + 3)
    assert avg == [(T0 + 2, pytest.approx(87.5))]  # the variant's average over its instances
    one = (("EndpointName", "ep"), ("InstanceId", "ep-A-1"), ("VariantName", "A"))
    mem = store.datapoints(MetricQuery(INSTANCE_NAMESPACE, "MemoryUtilization", one, 60, "Maximum"), T0, T0 + 60)
    assert mem == [(T0, pytest.approx(4000 / 4000 * 100))]
    green = (("EndpointConfigName", "cfg"), *dims)
    disk = store.datapoints(MetricQuery(INSTANCE_NAMESPACE, "DiskUtilization", green, 60, "Average"), T0, T0 + 60)
    assert len(disk) == 1 and 0 < disk[0][1] <= 100

    families = {m.name: m for m in sampler.collect()}
    cpu = {s.labels["instance"]: s.value for s in families["servekit_instance_cpu_utilization_percent"].samples}
    assert cpu == {"ep-A-1": pytest.approx(150.0), "ep-A-2": pytest.approx(25.0)}

    # an instance that stopped (gone from hosting) or whose process exited leaves the samples and the gauges
    instances.pop()
    fake.gone(101)
    clock[0], mono[0] = T0 + 3, 53.0
    [only] = sampler.sample()
    assert only.instance.instance_id == "ep-A-1" and only.rss_bytes == 1000 * 1024
    families = {m.name: m for m in sampler.collect()}
    assert [s.labels["instance"] for s in families["servekit_instance_memory_rss_bytes"].samples] == ["ep-A-1"]
    fake.gone(100)
    assert sampler.sample() == []
    assert all(m.samples == [] for m in sampler.collect())
