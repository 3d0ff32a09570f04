"""The end of a log file, for failure reasons that say what a process wrote last."""

from __future__ import annotations

import os


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
