"""Reading files for failure reasons: the end of a log, and a file a job wrote (never through a link)."""

from __future__ import annotations

import os
import stat


def tail_text(path: str | os.PathLike[str], max_bytes: int = 16384) -> str:
    """The file's last ``max_bytes`` bytes as text (undecodable bytes replaced); "" when it cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - max_bytes))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def tail_lines(path: str | os.PathLike[str], lines: int, max_bytes: int = 16384) -> str:
    """The file's last ``lines`` lines (within its last ``max_bytes`` bytes)."""
    return "\n".join(tail_text(path, max_bytes).splitlines()[-lines:])


def read_beneath(root: str | os.PathLike[str], relative: str, max_bytes: int) -> str | None:
    """The text (at most ``max_bytes`` bytes, undecodable bytes replaced) of the regular file ``relative`` under
    ``root``, opened one component at a time beneath ``root`` without following a symbolic link (``O_NOFOLLOW``
    at each step), and refused when it is not a regular file (a FIFO, a device) or has another name elsewhere (a
    hard link made by code that could see a file this process should not read out). None when there is no such
    file. For files a job wrote: the job may have replaced any part of the path with a link out of its folder."""
    parts = [p for p in relative.split("/") if p]
    if not parts or any(p in (".", "..") for p in parts):
        raise ValueError(f"{relative!r} must be a relative path without . or ..")
    directory = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        for part in parts[:-1]:
            inner = os.open(part, directory, dir_fd=fd)
            os.close(fd)
            fd = inner
        file = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
        try:
            st = os.fstat(file)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                return None
            chunks, left = [], max_bytes
            while left > 0 and (chunk := os.read(file, min(left, 65536))):
                chunks.append(chunk)
                left -= len(chunk)
        finally:
            os.close(file)
    except OSError:  # ELOOP (a link), ENOTDIR, ENOENT, ...
        return None
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", "replace")
