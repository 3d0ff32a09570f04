"""Network namespaces made from this process for the processes it starts: a job's hosts, an isolated model's
instance. A namespace is held by a descriptor (``/proc/<pid>/fd/<n>`` is what ``nsenter --net=`` opens).

- As root (CAP_SYS_ADMIN) a thread of this process unshares its network namespace, or enters one, and comes back
  (``setns`` and ``unshare`` move only the calling thread); sockets made there stay there.
- As an ordinary user, where the kernel lets users make user namespaces, a helper process (``unshare --user
  --map-root-user --net``) makes the namespace in a user namespace of its own, which this user owns: it hands back
  descriptors of both, and makes the sockets asked of it there (this process may not enter them: ``setns`` needs
  CAP_SYS_ADMIN in its own user namespace). Commands enter both with ``nsenter --preserve-credentials``.

Either way this process carries bytes between those sockets and its own (:func:`forwarder`)."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import functools
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
HELPER_READY_S = 10.0
T = TypeVar("T")


@functools.cache
def _users_may() -> bool:
    """Whether this (non-root) user may make a user namespace holding a network namespace here (kernels and
    distributions can refuse it: ``kernel.unprivileged_userns_clone``, AppArmor)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    try:
        done = subprocess.run(
            [unshare, "--user", "--map-root-user", "--net", "true"], capture_output=True, timeout=HELPER_READY_S
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def available() -> bool:
    """Whether namespaces can be made here: as root, or as a user the kernel lets make user namespaces; with
    nsenter to put processes in them."""
    if shutil.which("nsenter") is None:
        return False
    return os.geteuid() == 0 or _users_may()


def path(fd: int) -> str:
    """Where another process opens the namespace ``fd`` holds."""
    return f"/proc/{os.getpid()}/fd/{fd}"


def _call(name: str, *args: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")


def _lo_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s.fileno(), _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s.fileno(), _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | _IFF_UP))


def _own_thread(work: Callable[[], T]) -> T:
    """``work`` in a thread made for it, which ends after (it may leave that thread in another namespace)."""
    out: dict[str, object] = {}

    def run() -> None:
        try:
            out["value"] = work()
        except BaseException as exc:
            out["error"] = exc

    thread = threading.Thread(target=run, name="servekit-netns")
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]  # type: ignore[misc]
    return out["value"]  # type: ignore[return-value]


def _tcp(listen_port: int | None) -> socket.socket:
    """A non-blocking TCP socket in the calling thread's namespace; listening on its ``127.0.0.1:listen_port`` when
    one is given."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if listen_port is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", listen_port))
            sock.listen(128)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


# The helper of an ordinary user's namespace: run by ``unshare --user --map-root-user --net`` (root in the new user
# namespace, so it may bring its loopback up), it sends descriptors of its user and network namespaces on the
# channel (a SOCK_SEQPACKET socket, descriptor argv[1]), then for each request ("s": a socket, "l<port>": one
# listening on 127.0.0.1:<port>) sends the socket back, or "e<why>"; it ends when the channel does. Plain Python with
# nothing imported from servekit, so it starts in milliseconds wherever servekit is installed.
_HELPER = r"""
import array, fcntl, os, socket, struct, sys
ch = socket.socket(fileno=int(sys.argv[1]))
def send(fds):
    ch.sendmsg([b"k"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    flags = struct.unpack("16sH14x", fcntl.ioctl(s.fileno(), 0x8913, struct.pack("16sH14x", b"lo", 0)))[1]
    fcntl.ioctl(s.fileno(), 0x8914, struct.pack("16sH14x", b"lo", flags | 1))
send([os.open("/proc/self/ns/user", os.O_RDONLY), os.open("/proc/self/ns/net", os.O_RDONLY)])
while True:
    try:
        req = ch.recv(64)
    except OSError:
        break
    if not req:
        break
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if req[:1] == b"l":
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", int(req[1:])))
            s.listen(128)
        send([s.fileno()])
    except OSError as exc:
        ch.send(b"e" + str(exc).encode()[:4000])
    finally:
        s.close()
"""


@dataclass
class _Helper:
    """The process holding an ordinary user's namespace, and the channel sockets are asked for on."""

    proc: subprocess.Popen[bytes]
    channel: socket.socket
    lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def start(cls) -> tuple[_Helper, int, int]:
        """The helper, once it has sent them, and descriptors of its user and network namespaces."""
        unshare = shutil.which("unshare") or "unshare"
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            proc = subprocess.Popen(
                [
                    unshare,
                    "--user",
                    "--map-root-user",
                    "--net",
                    "--",
                    sys.executable,
                    "-I",
                    "-c",
                    _HELPER,
                    str(theirs.fileno()),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=(theirs.fileno(),),
            )
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        helper = cls(proc, ours)
        try:
            ours.settimeout(HELPER_READY_S)
            fds = helper._receive(2)
        except BaseException:
            helper.close()
            raise
        return helper, fds[0], fds[1]

    def _receive(self, count: int) -> list[int]:
        try:
            msg, fds, _, _ = socket.recv_fds(self.channel, 4096, count)
        except TimeoutError:
            msg, fds = b"etimed out", []
        for fd in fds:
            os.set_inheritable(fd, False)
        if msg[:1] == b"k" and len(fds) == count:
            return fds
        for fd in fds:
            os.close(fd)
        why = msg[1:].decode(errors="replace") if msg[:1] == b"e" else ""
        if not msg and self.proc.poll() is not None and self.proc.stderr is not None:
            why = self.proc.stderr.read().decode(errors="replace").strip()
        raise OSError(f"the network namespace's helper: {why or 'no answer'}")

    def socket(self, listen_port: int | None) -> socket.socket:
        with self.lock:
            self.channel.send(b"s" if listen_port is None else b"l%d" % listen_port)
            (fd,) = self._receive(1)
        sock = socket.socket(fileno=fd)
        sock.setblocking(False)
        return sock

    def close(self) -> None:
        self.channel.close()  # the helper ends when its channel does
        try:
            self.proc.wait(HELPER_READY_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stderr is not None:
            self.proc.stderr.close()


@dataclass
class Namespace:
    """A network namespace this process holds (and, made by an ordinary user, the user namespace that owns it)."""

    net_fd: int
    user_fd: int | None = None
    helper: _Helper | None = None

    def enter(self) -> list[str]:
        """The command prefix that runs a command in the namespace (as this user; root inside its user namespace
        when this process is not root)."""
        nsenter = shutil.which("nsenter") or "nsenter"
        if self.user_fd is None:
            return [nsenter, f"--net={path(self.net_fd)}", "--"]
        # --preserve-credentials: entering keeps this user's ids (root in that namespace), without setgroups, which
        # the helper's namespace refuses
        return [nsenter, f"--user={path(self.user_fd)}", f"--net={path(self.net_fd)}", "--preserve-credentials", "--"]

    def slirp_args(self) -> list[str]:
        """slirp4netns's arguments that name the namespace (before its tap device's name)."""
        user = [] if self.user_fd is None else [f"--userns-path={path(self.user_fd)}"]
        return [*user, "--netns-type=path", path(self.net_fd)]

    def socket(self, listen_port: int | None = None) -> socket.socket:
        """A non-blocking TCP socket made in the namespace (a connection from it stays there), listening on its
        ``127.0.0.1:listen_port`` when one is given. OSError when it cannot be made."""
        if self.helper is not None:
            return self.helper.socket(listen_port)

        def work() -> socket.socket:
            _call("setns", self.net_fd, CLONE_NEWNET)
            return _tcp(listen_port)

        return _own_thread(work)

    def close(self) -> None:
        if self.helper is not None:
            self.helper.close()
        for fd in (self.net_fd, self.user_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)


def make() -> Namespace:
    """A new network namespace with its loopback up. OSError where this process may not make one."""
    if os.geteuid() != 0:
        helper, user_fd, net_fd = _Helper.start()
        return Namespace(net_fd, user_fd, helper)

    def work() -> int:
        _call("unshare", CLONE_NEWNET)
        _lo_up()
        return os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY | os.O_CLOEXEC)

    return Namespace(_own_thread(work))


async def carry(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Bytes from ``reader`` to ``writer`` until either side ends; then ``writer`` is closed."""
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


def forwarder(
    connect: Callable[[], Awaitable[Streams]],
) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    """A server's connection handler that opens the other side with ``connect`` and carries bytes both ways until
    both end; a connection whose other side cannot be opened is closed."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await connect()
        except OSError:
            writer.close()
            return
        await asyncio.gather(carry(reader, up_writer), carry(up_reader, writer))

    return handle


async def close_server(server: asyncio.Server) -> None:
    """Stop listening; connections still carried end with their processes."""
    server.close()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(server.wait_closed(), 1.0)
