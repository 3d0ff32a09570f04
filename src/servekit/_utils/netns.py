"""Network namespaces made from this process (root: CAP_SYS_ADMIN) for the processes it starts: a job's hosts, an
isolated model's instance. A namespace is held by a descriptor (``/proc/<pid>/fd/<n>`` is what ``nsenter --net=``
opens); sockets are made in it by a thread that enters it and comes back (``setns`` and ``unshare`` move only the
calling thread), and this process carries bytes between those sockets and its own."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import os
import shutil
import socket
import struct
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
T = TypeVar("T")


def available() -> bool:
    """Whether namespaces can be made here: root, with nsenter to put processes in them."""
    return os.geteuid() == 0 and shutil.which("nsenter") is not None


def path(fd: int) -> str:
    """Where another process opens the namespace ``fd`` holds."""
    return f"/proc/{os.getpid()}/fd/{fd}"


def enter(fd: int) -> list[str]:
    """The command prefix that runs a command in the namespace ``fd`` holds."""
    return [shutil.which("nsenter") or "nsenter", f"--net={path(fd)}", "--"]


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


def make(listen_port: int | None = None) -> tuple[int, socket.socket | None]:
    """A new network namespace with its loopback up: a descriptor that holds it, and a non-blocking socket
    listening on its ``127.0.0.1:listen_port`` when one is asked for. OSError where this process may not."""

    def work() -> tuple[int, socket.socket | None]:
        _call("unshare", CLONE_NEWNET)
        _lo_up()
        fd = os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        if listen_port is None:
            return fd, None
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", listen_port))
            sock.listen(128)
            sock.setblocking(False)
        except OSError:
            sock.close()
            os.close(fd)
            raise
        return fd, sock

    return _own_thread(work)


def socket_in(fd: int) -> socket.socket:
    """A non-blocking TCP socket made in the namespace ``fd`` holds (a connection from it stays there)."""

    def work() -> socket.socket:
        _call("setns", fd, CLONE_NEWNET)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        return sock

    return _own_thread(work)


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
