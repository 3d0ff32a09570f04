"""The sandbox's seccomp filter, run on a small classic-BPF interpreter: the refused calls answer EPERM on the
machine's own ABI, every call of another ABI (32-bit x86, x32) is refused, everything else is allowed."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from servekit.services.training.sandbox import Layout, command
from servekit.services.training.seccomp import ARCHES, REFUSED, RET_ALLOW, RET_EPERM, X32_BIT, program


def run(code: bytes, arch: int, nr: int) -> int:
    """What the filter returns for a call ``nr`` of ABI ``arch`` (LD abs word, JEQ/JGE k, RET k only)."""
    insns = [struct.unpack("=HBBI", code[i : i + 8]) for i in range(0, len(code), 8)]
    data = {0: nr, 4: arch}
    acc, pc = 0, 0
    while True:
        op, jt, jf, k = insns[pc]
        if op == 0x20:
            acc = data[k]
        elif op in (0x15, 0x35):
            taken = acc == k if op == 0x15 else acc >= k
            pc += jt if taken else jf
        elif op == 0x06:
            return k
        else:
            raise AssertionError(f"unexpected instruction {op:#x}")
        pc += 1


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_refused_calls_get_eperm_and_the_rest_run(machine: str) -> None:
    code = program(machine)
    assert code is not None
    audit, column = ARCHES[machine]
    for name, numbers in REFUSED.items():
        assert run(code, audit, numbers[column]) == RET_EPERM, name
    for allowed in (0, 1, 2, 3, 9, 56, 57, 59, 60, 231):  # read, write, open(at), close, mmap, clone, fork, exec, exit
        if allowed not in {n[column] for n in REFUSED.values()}:
            assert run(code, audit, allowed) == RET_ALLOW, allowed
    assert run(code, 0x40000003, 1) == RET_EPERM  # i386's write: another ABI is refused whole


def test_x32_calls_are_refused_on_x86_64() -> None:
    code = program("x86_64")
    assert code is not None
    assert run(code, ARCHES["x86_64"][0], X32_BIT | 1) == RET_EPERM


def test_no_filter_where_servekit_has_no_table() -> None:
    assert program("ppc64le") is None


def test_the_filter_is_handed_to_bubblewrap_on_a_descriptor(tmp_path: Path) -> None:
    argv = command(Layout(tmp_path / "ml", seccomp=tmp_path / "seccomp.bpf"), ["python3"], "bwrap")
    shell = ["/bin/sh", "-c", 'exec 9<"$1" && shift && exec "$@"', "servekit-sandbox", str(tmp_path / "seccomp.bpf")]
    assert argv[:5] == shell
    assert argv[5] == "bwrap" and argv[argv.index("--seccomp") + 1] == "9"
    assert command(Layout(tmp_path / "ml"), ["python3"], "bwrap")[0] == "bwrap"


def test_the_shell_joins_the_hosts_cgroup_before_anything_starts(tmp_path: Path) -> None:
    layout = Layout(tmp_path / "ml", seccomp=tmp_path / "f.bpf", cgroup=tmp_path / "cg")
    argv = command(layout, ["python3"], "bwrap")
    script = 'echo $$ > "$1/cgroup.procs" && shift && exec 9<"$1" && shift && exec "$@"'
    assert argv[:6] == ["/bin/sh", "-c", script, "servekit-sandbox", str(tmp_path / "cg"), str(tmp_path / "f.bpf")]
    assert argv[6] == "bwrap"
