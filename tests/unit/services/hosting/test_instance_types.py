"""Instance types: the bundled table, user types from YAML/TOML merged over it, endpoint cost, and warnings (never
clamps) when instances ask for more than the machine has."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from servekit.config.instance_types import InstanceTypeEntry, load_instance_types_file, parse_instance_types
from servekit.errors import ConfigError
from servekit.services.hosting.instance_types import (
    BUNDLED,
    BUNDLED_SOURCE,
    InstanceType,
    Machine,
    UnknownInstanceType,
    endpoint_cost_per_hour,
    instance_types,
    load_instance_types,
    oversubscription,
    parse_meminfo,
    this_machine,
)

REQUIRED = [
    "ml.t2.medium",
    "ml.t3.medium",
    "ml.t3.large",
    "ml.t3.xlarge",
    *[f"ml.m5.{s}" for s in ("large", "xlarge", "2xlarge", "4xlarge")],
    *[f"ml.m6i.{s}" for s in ("large", "xlarge", "2xlarge", "4xlarge")],
    *[f"ml.c5.{s}" for s in ("large", "xlarge", "2xlarge", "4xlarge")],
    *[f"ml.c6i.{s}" for s in ("large", "xlarge", "2xlarge", "4xlarge")],
    *[f"ml.r5.{s}" for s in ("large", "xlarge", "2xlarge")],
]


def test_the_bundled_table_holds_the_common_cpu_types() -> None:
    table = instance_types()
    assert set(REQUIRED) <= set(table.names()) and len(table) >= 20
    assert table["ml.m5.large"] == InstanceType("ml.m5.large", 2, 8.0, 0.115, BUNDLED_SOURCE)
    assert "us-east-1" in BUNDLED_SOURCE and "2024" in BUNDLED_SOURCE


def test_the_bundled_figures_are_consistent() -> None:
    by_name = {t.name: t for t in BUNDLED}
    assert len(by_name) == len(BUNDLED)
    for t in BUNDLED:
        assert t.name.startswith("ml.") and t.vcpus >= 1 and t.memory_gib > 0 and 0 < t.price_per_hour < 30
    for family in ("m5", "m6i", "c5", "c6i", "r5", "t3"):  # within a family, a bigger size costs more and has more
        sizes = sorted((t for t in BUNDLED if t.name.split(".")[1] == family), key=lambda t: t.vcpus)
        for small, big in itertools.pairwise(sizes):
            assert big.price_per_hour >= small.price_per_hour and big.memory_gib >= small.memory_gib, (small, big)
    # memory per vCPU: compute 2 GiB, general 4, memory 8
    assert {by_name[f"ml.c5.{s}"].memory_gib / by_name[f"ml.c5.{s}"].vcpus for s in ("large", "4xlarge")} == {2.0}
    assert by_name["ml.m6i.xlarge"].memory_gib / by_name["ml.m6i.xlarge"].vcpus == 4.0
    assert by_name["ml.r5.2xlarge"].memory_gib / by_name["ml.r5.2xlarge"].vcpus == 8.0


def test_the_gpu_families_say_their_cards() -> None:
    table = instance_types()
    g4dn = table["ml.g4dn.xlarge"]
    assert (g4dn.vcpus, g4dn.memory_gib, g4dn.gpus, g4dn.gpu_memory_gib) == (4, 16.0, 1, 16.0)
    assert (table["ml.g5.12xlarge"].gpus, table["ml.g5.12xlarge"].gpu_memory_gib) == (4, 24.0)
    assert (table["ml.p3.16xlarge"].gpus, table["ml.p3.2xlarge"].memory_gib) == (8, 61.0)
    for family in ("g4dn", "g5", "p3"):
        types = [t for t in table if t.name.split(".")[1] == family]
        assert len(types) >= 3 and all(t.gpus >= 1 and t.gpu_memory_gib >= 16 for t in types)
    assert all(t.gpus == 0 for t in table if t.name.split(".")[1] in ("m5", "c5", "r5", "t3"))
    assert g4dn.price_per_hour < table["ml.g5.xlarge"].price_per_hour < table["ml.p3.2xlarge"].price_per_hour


def test_a_local_gpu_type_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "types.yaml"
    path.write_text(
        "instance_types: [{name: my.gpu, vcpus: 8, memory_gib: 32, price_per_hour: 1, gpus: 2, gpu_memory_gib: 40}]"
    )
    mine = load_instance_types(path)["my.gpu"]
    assert (mine.gpus, mine.gpu_memory_gib) == (2, 40.0)


def test_an_unknown_type_names_the_known_ones() -> None:
    with pytest.raises(UnknownInstanceType) as caught:
        instance_types()["ml.p4d.24xlarge"]
    assert caught.value.name == "ml.p4d.24xlarge"
    assert "unknown instance type 'ml.p4d.24xlarge'; known types: ml.c4.2xlarge" in str(caught.value)
    assert instance_types().get("ml.p4d.24xlarge") is None and "ml.p4d.24xlarge" not in instance_types()


YAML = """
instance_types:
  - name: ml.local.small
    vcpus: 1
    memory_gib: 0.5
    price_per_hour: 0
  - name: ml.m5.large
    vcpus: 2
    memory_gib: 8
    price_per_hour: 0.2
"""

TOML = """
[[instance_types]]
name = "ml.local.small"
vcpus = 1
memory_gib = 0.5
price_per_hour = 0

[[instance_types]]
name = "ml.m5.large"
vcpus = 2
memory_gib = 8
price_per_hour = 0.2
"""


@pytest.mark.parametrize(("suffix", "text"), [(".yaml", YAML), (".yml", YAML), (".toml", TOML)])
def test_local_types_merge_over_the_bundled_ones(tmp_path: Path, suffix: str, text: str) -> None:
    path = tmp_path / f"types{suffix}"
    path.write_text(text)
    assert load_instance_types_file(path) == (
        InstanceTypeEntry("ml.local.small", 1, 0.5, 0.0),
        InstanceTypeEntry("ml.m5.large", 2, 8.0, 0.2),
    )
    table = load_instance_types(path)
    assert table["ml.local.small"] == InstanceType("ml.local.small", 1, 0.5, 0.0, f"local: {path}")
    assert table["ml.m5.large"].price_per_hour == 0.2 and table["ml.m5.large"].source == f"local: {path}"
    assert table["ml.c5.large"].source == BUNDLED_SOURCE
    assert len(table) == len(BUNDLED) + 1
    assert len(load_instance_types()) == len(BUNDLED)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("instance_types: {a: 1}", "instance_types must be a list"),
        ("types: []", r"unknown top-level keys \['types'\]"),
        ("- 1", "expected a mapping"),
        ("instance_types: [1]", r"instance_types\[0\]: an entry is a mapping"),
        ("instance_types: [{name: a, vcpus: 1, memory_gib: 1}]", r"instance_types\[0\]: missing price_per_hour"),
        (
            "instance_types: [{name: a, vcpus: 1, memory_gib: 1, price_per_hour: 0, tpus: 1}]",
            r"unknown fields \['tpus'\]; expected name, vcpus, memory_gib, price_per_hour \(and optionally gpus",
        ),
        (
            "instance_types: [{name: a, vcpus: 1, memory_gib: 1, price_per_hour: 0, gpus: -1}]",
            r"instance_types\[0\].gpus: must be a whole number of at least 0, got -1",
        ),
        ("instance_types: [{name: a, vcpus: 0, memory_gib: 1, price_per_hour: 0}]", r"\[0\]\.vcpus: must be a whole"),
        ("instance_types: [{name: a, vcpus: 1.5, memory_gib: 1, price_per_hour: 0}]", r"\.vcpus: must be a whole"),
        ("instance_types: [{name: a, vcpus: true, memory_gib: 1, price_per_hour: 0}]", r"\.vcpus: must be a whole"),
        ("instance_types: [{name: a, vcpus: 1, memory_gib: 0, price_per_hour: 0}]", r"memory_gib: must be more than 0"),
        ("instance_types: [{name: a, vcpus: 1, memory_gib: x, price_per_hour: 0}]", r"memory_gib: must be a number"),
        ("instance_types: [{name: a, vcpus: 1, memory_gib: .nan, price_per_hour: 0}]", r"memory_gib: must be a num"),
        ("instance_types: [{name: a, vcpus: 1, memory_gib: 1, price_per_hour: -1}]", r"price_per_hour: must be at le"),
        ("instance_types: [{name: ../x, vcpus: 1, memory_gib: 1, price_per_hour: 0}]", r"\.name: '\.\./x' is not a"),
        (
            "instance_types: [{name: a, vcpus: 1, memory_gib: 1, price_per_hour: 0}, "
            "{name: a, vcpus: 2, memory_gib: 1, price_per_hour: 0}]",
            r"instance_types\[1\]\.name: 'a' is defined twice",
        ),
        ("instance_types: [", "invalid YAML"),
    ],
)
def test_a_bad_file_names_the_file_entry_and_field(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        parse_instance_types(text, "/etc/types.yaml")
    assert str(caught.value).startswith("/etc/types.yaml: ")


def test_unreadable_and_unknown_formats(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read instance-types file"):
        load_instance_types_file(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match=r"\.yaml, \.yml or \.toml"):
        parse_instance_types("", "types.json")
    with pytest.raises(ConfigError, match="invalid TOML"):
        parse_instance_types("[[instance_types]\n", "types.toml")
    assert parse_instance_types("", "empty.yaml") == ()


def test_endpoint_cost_is_price_times_count_over_variants() -> None:
    table = instance_types()
    assert endpoint_cost_per_hour([("ml.m5.large", 2), ("ml.c5.xlarge", 1)], table) == pytest.approx(2 * 0.115 + 0.204)
    assert endpoint_cost_per_hour([], table) == 0.0
    assert endpoint_cost_per_hour([("ml.m5.large", 0)], table) == 0.0
    with pytest.raises(UnknownInstanceType):
        endpoint_cost_per_hour([("ml.nope", 1)], table)


def test_no_warning_while_the_machine_has_room() -> None:
    table = instance_types()
    assert oversubscription([(table["ml.m5.large"], 2)], Machine(cpus=8, memory_gib=32)) == []
    assert oversubscription([], Machine(cpus=1, memory_gib=1)) == []


def test_oversubscription_warns_and_never_clamps() -> None:
    table = instance_types()
    demands = [(table["ml.m5.xlarge"], 3), (table["ml.c5.large"], 1)]  # 14 vCPUs, 52 GiB
    warnings = oversubscription(demands, Machine(cpus=8, memory_gib=31.3))
    assert warnings == [
        "the instances (3 x ml.m5.xlarge, 1 x ml.c5.large) ask for 14 vCPUs; this machine has 8 "
        "(oversubscribed 1.8x): they will share CPUs",
        "the instances (3 x ml.m5.xlarge, 1 x ml.c5.large) may use up to 52 GiB; this machine has 31.3 GiB "
        "(oversubscribed 1.7x): an instance may fail with an out-of-memory reason",
    ]
    assert demands == [(table["ml.m5.xlarge"], 3), (table["ml.c5.large"], 1)]  # asked-for counts untouched


def test_a_single_instance_bigger_than_the_machine_is_named() -> None:
    big = instance_types()["ml.r5.4xlarge"]  # 16 vCPUs, 128 GiB
    warnings = oversubscription([(big, 1)], Machine(cpus=4, memory_gib=16))
    assert warnings[:2] == [
        "one ml.r5.4xlarge instance asks for 16 vCPUs; this machine has 4: its model threads will share CPUs",
        "one ml.r5.4xlarge instance may use up to 128 GiB; this machine has 16.0 GiB",
    ]
    assert len(warnings) == 4


MEMINFO = "MemTotal:       32768000 kB\nMemFree:         1000 kB\n"


def test_meminfo_and_this_machine(tmp_path: Path) -> None:
    assert parse_meminfo(MEMINFO) == pytest.approx(32768000 / 1024**2)
    assert parse_meminfo("MemFree: 1 kB\n") is None
    (tmp_path / "meminfo").write_text(MEMINFO)
    machine = this_machine(tmp_path / "meminfo", cpu_count=lambda: 6)
    assert machine == Machine(6, pytest.approx(31.25))  # type: ignore[arg-type]
    real = this_machine()
    assert real.cpus >= 1 and real.memory_gib > 0
    assert real.cpus <= (os.cpu_count() or 1)
    fallback = this_machine(tmp_path / "no-such-file", cpu_count=lambda: None)
    assert fallback.cpus == 1 and fallback.memory_gib > 0  # sysconf's page count
