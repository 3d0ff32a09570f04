"""The sandbox a job runs in: a private mount namespace (bubblewrap) where ``/opt/ml`` is the job's own folder, the
channels are read-only, the servekit home is hidden, and the rest of the machine is read-only (a script that writes
outside ``/opt/ml`` and ``/tmp`` fails with EROFS, as it would on a read-only container image)."""

from __future__ import annotations

import shlex
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from servekit.services.training.contract import CODE, DATA, ML

INSTALL_HINT = (
    "servekit runs training jobs in a bubblewrap sandbox that shows them /opt/ml, and bwrap is not installed: "
    "install it (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap) and start the job again"
)


BIN = "/opt/servekit/bin"  # on PATH first in the sandbox


class SandboxUnavailable(RuntimeError):
    pass


def bwrap() -> str:
    found = shutil.which("bwrap")
    if found is None:
        raise SandboxUnavailable(INSTALL_HINT)
    return found


@dataclass(frozen=True)
class Layout:
    """Where a job's folders are on the host."""

    ml: Path  # mounted as /opt/ml (read-write)
    channels: Mapping[str, Path] = field(default_factory=dict)  # name -> a folder, mounted read-only
    code: Path | None = None  # mounted read-only at /opt/ml/code
    hidden: Sequence[Path] = ()  # folders the job must not see (the servekit home)
    # more folders: host path -> absolute path in the sandbox, and whether the job may write there (a processing
    # job's inputs and outputs at their LocalPath)
    mounts: Sequence[tuple[Path, str, bool]] = ()
    bin: Path | None = None  # mounted at BIN, first on PATH: python/python3 wrappers of servekit's interpreter
    hostname: str | None = None  # the job host's name (algo-1, ...), in its own UTS namespace
    hosts_file: Path | None = None  # mounted at /etc/hosts: every host of the job resolves to 127.0.0.1
    devices: Sequence[str] = ()  # device nodes bound into the sandbox's minimal /dev (a GPU host's /dev/nvidia*)


def hosts_file(path: Path, hosts: Sequence[str]) -> Path:
    """An ``/etc/hosts`` where the job's hosts are this machine's loopback (they rendezvous there)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"127.0.0.1\tlocalhost {' '.join(hosts)}\n::1\tlocalhost ip6-localhost ip6-loopback\n")
    return path


def python_wrappers(folder: Path, python: str) -> Path:
    """``python`` and ``python3`` in ``folder`` that run ``python`` (a wrapper keeps a virtualenv's interpreter
    finding its own site-packages, which a bind of the binary would not)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("python", "python3"):
        wrapper = folder / name
        wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(python)} "$@"\n')
        wrapper.chmod(0o755)
    return folder


def command(layout: Layout, argv: Sequence[str], bwrap_path: str = "bwrap") -> list[str]:
    """The bubblewrap command line that runs ``argv`` with ``layout`` mounted."""
    out = [bwrap_path, "--die-with-parent", "--new-session", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    out += ["--tmpfs", "/tmp"]
    for node in layout.devices:  # absent nodes are skipped (a driver without nvidia-uvm-tools)
        out += ["--dev-bind-try", node, node]
    if layout.hostname is not None:
        out += ["--unshare-uts", "--hostname", layout.hostname]
    if layout.hosts_file is not None:
        out += ["--ro-bind", str(layout.hosts_file), "/etc/hosts"]
    for folder in layout.hidden:
        out += ["--tmpfs", str(folder)]
    out += ["--tmpfs", "/opt", "--bind", str(layout.ml), ML]
    for name, folder in layout.channels.items():
        out += ["--ro-bind", str(folder), f"{DATA}/{name}"]
    if layout.code is not None:
        out += ["--ro-bind", str(layout.code), CODE]
    for source, target, writable in layout.mounts:
        out += ["--bind" if writable else "--ro-bind", str(source), target]
    if layout.bin is not None:  # `python3 script.py` (a processing entrypoint) means servekit's Python
        out += ["--ro-bind", str(layout.bin), BIN]
    out += ["--chdir", CODE if layout.code is not None else ML, "--", *argv]
    return out
