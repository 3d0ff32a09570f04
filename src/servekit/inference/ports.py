"""Interfaces the inference layer calls outward; observability implements them, the entry point wires them."""

from __future__ import annotations

from typing import Protocol


class RequestObserver(Protocol):
    def on_request(self, *, model: str, version: str, api: str, protocol: str, status: int, seconds: float) -> None: ...
