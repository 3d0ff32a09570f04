"""A job's network: one network namespace for all its hosts (they rendezvous on its loopback, as a job's
containers talk to one another), holding nothing of this machine's.

- Without ``EnableNetworkIsolation`` the job reaches the plane only through its signed API: its
  ``AWS_ENDPOINT_URL`` (``http://127.0.0.1:<port>``) answers in the namespace, and this process carries each
  connection to the plane; no other port of this machine's loopback (the console, the endpoints' instances, other
  jobs) is there. The internet is reached through slirp4netns, user-mode NAT that refuses this machine's loopback
  (``--disable-host-loopback``), with its DNS forwarder as the namespace's resolver.
- With it, the namespace has nothing but its loopback: the hosts still reach one another, nothing else.

Made by :mod:`servekit._utils.netns` where servekit runs as root, or as an ordinary user the kernel lets make user
namespaces; the hosts' sandboxes enter it with ``nsenter``. Elsewhere (user namespaces refused, hosts on Ray nodes)
:func:`job_network` gives None: the sandbox makes a namespace of its own per host for an isolated job, and a job
without isolation shares this machine's network."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from servekit._utils import netns

log = logging.getLogger(__name__)

SLIRP_DNS = "10.0.2.3"  # slirp4netns's DNS forwarder, in its default network
SLIRP_READY_S = 10.0
SLIRP_HINT = "install slirp4netns (apt-get install slirp4netns) for jobs without EnableNetworkIsolation to reach it"


@dataclass(frozen=True)
class JobNetwork:
    """A job's namespace, as its hosts' sandboxes enter it."""

    enter: tuple[str, ...]  # the command prefix that puts a host's sandbox in it (nsenter …)
    resolv_conf: Path | None  # the namespace's /etc/resolv.conf (slirp4netns's DNS), None without internet


def loopback_address(url: str) -> tuple[str, int] | None:
    """The host and port of ``url`` (the plane's endpoint a job is given) when it is on this machine's loopback;
    None otherwise (a plane elsewhere is reached as the internet is)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if not parts.port or not (host == "localhost" or host == "::1" or host.startswith("127.")):
        return None
    return host, parts.port


def available() -> bool:
    """Whether jobs' hosts can share a namespace made here."""
    return netns.available()


async def _start_slirp(ns: netns.Namespace, folder: Path) -> tuple[asyncio.subprocess.Process, Path, int]:
    """slirp4netns on the namespace (its NAT to the internet, not this machine's loopback), once it says ready;
    with the pipe end whose closing ends it (this process's exit closes it too, a kill included)."""
    binary = shutil.which("slirp4netns")
    if binary is None:
        raise FileNotFoundError(SLIRP_HINT)
    ready_r, ready_w = os.pipe()
    exit_r, exit_w = os.pipe()
    proc = None
    try:
        proc = await asyncio.create_subprocess_exec(
            binary,
            "--configure",
            "--mtu=65520",
            "--disable-host-loopback",
            f"--ready-fd={ready_w}",
            f"--exit-fd={exit_r}",
            *ns.slirp_args(),
            "tap0",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            pass_fds=(ready_w, exit_r),
        )
        os.close(ready_w)
        ready_w = -1
        said = await asyncio.wait_for(asyncio.to_thread(os.read, ready_r, 1), SLIRP_READY_S)
        if said != b"1":
            err = await proc.stderr.read() if proc.stderr else b""
            raise OSError(f"slirp4netns did not start: {err.decode(errors='replace').strip()}")
    except BaseException:
        os.close(exit_w)
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        raise
    finally:
        for end in (ready_r, ready_w, exit_r):
            if end >= 0:
                os.close(end)
    folder.mkdir(parents=True, exist_ok=True)
    resolv = folder / "resolv.conf"
    resolv.write_text(f"nameserver {SLIRP_DNS}\n")
    return proc, resolv, exit_w


def _made(listen_port: int | None) -> tuple[netns.Namespace, socket.socket | None]:
    """A namespace, and its socket listening on ``listen_port`` when one is given."""
    ns = netns.make()
    try:
        return ns, None if listen_port is None else ns.socket(listen_port)
    except OSError:
        ns.close()
        raise


@contextlib.asynccontextmanager
async def job_network(
    plane: tuple[str, int] | None, isolated: bool, folder: Path, internet: bool = True
) -> AsyncIterator[JobNetwork | None]:
    """The job's namespace while the block runs (see the module's docstring), or None where none is made here.
    ``plane``: where the plane listens (its host and port), carried into the namespace unless ``isolated``;
    ``folder``: where the namespace's resolv.conf is written; ``internet``: whether slirp4netns gives the namespace
    the internet when it is not ``isolated`` (a transform run of an isolated model reaches the plane only)."""
    if not available():
        yield None
        return
    port = None if isolated or plane is None else plane[1]
    try:
        ns, sock = await asyncio.to_thread(_made, port)
    except OSError as exc:  # root without CAP_SYS_ADMIN (a container's): each sandbox makes its own
        log.warning("a job's hosts get no shared network namespace: %s", exc)
        yield None
        return
    server = slirp = None
    slirp_exit = -1
    try:
        resolv = None
        if sock is not None and plane is not None:
            host, plane_port = plane
            carried = netns.forwarder(lambda: asyncio.open_connection(host, plane_port))  # to the plane's signed API
            server = await asyncio.start_server(carried, sock=sock)
        if not isolated and internet:
            try:
                slirp, resolv, slirp_exit = await _start_slirp(ns, folder)
            except (OSError, TimeoutError) as exc:  # the plane is still there; the internet is not
                log.warning("a job has no internet: %s", exc)
        yield JobNetwork(tuple(ns.enter()), resolv)
    finally:
        if server is not None:
            await netns.close_server(server)
        elif sock is not None:
            sock.close()
        if slirp is not None:
            os.close(slirp_exit)  # it exits on its own; the kill is for one that does not
            with contextlib.suppress(ProcessLookupError):
                slirp.kill()
            await slirp.wait()
        await asyncio.to_thread(ns.close)
