"""The seccomp filter every job's sandbox runs under: a classic BPF program (what ``bwrap --seccomp FD`` loads) that
answers EPERM to the system calls a job has no business making, whoever starts the sandbox:

- mounting and namespaces: ``mount``, ``umount2``, ``pivot_root``, the new mount API, ``unshare``, ``setns`` (a
  job gets the namespaces it runs in, and makes no others: no user namespace to gain capabilities inside);
- the kernel: loading or removing modules, ``kexec``, ``reboot``, swap, ``bpf``, ``perf_event_open``,
  ``userfaultfd``, ``open_by_handle_at``, the system clock, ``syslog``, ``acct``, quotas;
- the keyrings: ``add_key``, ``request_key``, ``keyctl`` (a job run as root would otherwise share root's keyrings).

Other architectures' calls (32-bit x86 on x86-64, x32) are refused too, so a job cannot go round the table by
calling through another ABI. Built for x86-64 and AArch64; elsewhere jobs run without it (:func:`program` is None).
"""

from __future__ import annotations

import errno
import platform
import struct

# struct seccomp_data: nr at 0, arch at 4
_LD_ABS_W = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K
RET_ALLOW = 0x7FFF0000
RET_EPERM = 0x00050000 | errno.EPERM
X32_BIT = 0x40000000

# name -> (x86-64 number, AArch64 number), from each architecture's syscall table
REFUSED: dict[str, tuple[int, int]] = {
    "mount": (165, 40),
    "umount2": (166, 39),
    "pivot_root": (155, 41),
    "open_tree": (428, 428),
    "move_mount": (429, 429),
    "fsopen": (430, 430),
    "fsconfig": (431, 431),
    "fsmount": (432, 432),
    "fspick": (433, 433),
    "mount_setattr": (442, 442),
    "unshare": (272, 97),
    "setns": (308, 268),
    "init_module": (175, 105),
    "finit_module": (313, 273),
    "delete_module": (176, 106),
    "kexec_load": (246, 104),
    "kexec_file_load": (320, 294),
    "reboot": (169, 142),
    "swapon": (167, 224),
    "swapoff": (168, 225),
    "bpf": (321, 280),
    "perf_event_open": (298, 241),
    "userfaultfd": (323, 282),
    "open_by_handle_at": (304, 265),
    "settimeofday": (164, 170),
    "clock_settime": (227, 112),
    "adjtimex": (159, 171),
    "clock_adjtime": (305, 266),
    "syslog": (103, 116),
    "acct": (163, 89),
    "quotactl": (179, 60),
    "add_key": (248, 217),
    "request_key": (249, 218),
    "keyctl": (250, 219),
}
ARCHES = {"x86_64": (0xC000003E, 0), "aarch64": (0xC00000B7, 1), "arm64": (0xC00000B7, 1)}


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program(machine: str | None = None) -> bytes | None:
    """The filter for ``machine`` (``platform.machine()``), or None where servekit has no table for it."""
    arch = ARCHES.get(machine or platform.machine())
    if arch is None:
        return None
    audit, column = arch
    numbers = sorted({numbers[column] for numbers in REFUSED.values()})
    checks = [(_JGE_K, X32_BIT)] if column == 0 else []  # x32 calls are x86-64's numbers with bit 30 set
    checks += [(_JEQ_K, n) for n in numbers]
    head = [
        _insn(_LD_ABS_W, 0, 0, 4),  # arch
        _insn(_JEQ_K, 1, 0, audit),  # this machine's ABI: go on; another: EPERM
        _insn(_RET_K, 0, 0, RET_EPERM),
        _insn(_LD_ABS_W, 0, 0, 0),  # the call's number
    ]
    # each check jumps to the EPERM after ALLOW: from the i-th, skip the checks after it and ALLOW
    tests = [_insn(code, len(checks) - i, 0, k) for i, (code, k) in enumerate(checks)]
    return b"".join([*head, *tests, _insn(_RET_K, 0, 0, RET_ALLOW), _insn(_RET_K, 0, 0, RET_EPERM)])
