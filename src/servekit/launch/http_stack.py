"""Which event loop and HTTP/1.1 parser ``serve`` runs uvicorn with (``--loop``, ``--http``).

Light on purpose: the command line builds and checks this before it imports uvicorn. ``auto`` means the fast
pair where it is installed (uvloop and httptools are default dependencies wherever they have wheels) and the
pure-Python pair (asyncio, h11) elsewhere; naming one that is not installed is a configuration error, not a
silent fallback.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Literal, cast

from servekit.errors import ConfigError

EventLoop = Literal["asyncio", "uvloop"]
HttpParser = Literal["h11", "httptools"]
LOOP_CHOICES = ("auto", "asyncio", "uvloop")
HTTP_CHOICES = ("auto", "h11", "httptools")


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@dataclass(frozen=True, slots=True)
class HttpStack:
    """The resolved choice: never ``auto`` once built by :func:`http_stack`."""

    loop: EventLoop = "asyncio"
    http: HttpParser = "h11"

    def describe(self) -> str:
        return f"event loop {self.loop}, HTTP parser {self.http}"


def http_stack(loop: str = "auto", http: str = "auto") -> HttpStack:
    """``--loop`` and ``--http`` resolved against what is installed (ConfigError for an unknown or missing one)."""
    if loop not in LOOP_CHOICES:
        raise ConfigError(f"--loop must be one of {', '.join(LOOP_CHOICES)}, got {loop!r}")
    if http not in HTTP_CHOICES:
        raise ConfigError(f"--http must be one of {', '.join(HTTP_CHOICES)}, got {http!r}")
    for name, chosen in (("--loop", loop), ("--http", http)):
        if chosen not in ("auto", "asyncio", "h11") and not _installed(chosen):
            raise ConfigError(f"{name} {chosen} needs the {chosen} package (pip install {chosen})")
    if loop == "auto":
        loop = "uvloop" if _installed("uvloop") else "asyncio"
    if http == "auto":
        http = "httptools" if _installed("httptools") else "h11"
    return HttpStack(cast("EventLoop", loop), cast("HttpParser", http))
