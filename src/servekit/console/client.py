"""How the console reaches the control plane: one injected callable, the public API's own dispatch.

The console never opens the state database or imports the control plane; ``servekit up`` hands it an
:data:`ApiCall` that encodes each call as a client's JSON request, validates it against the service model and
answers with the decoded JSON response (timestamps as epoch seconds), so the console sees exactly what boto3 sees.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

# (service, operation, params, acting access key id or None for reads) -> the response JSON
ApiCall = Callable[[str, str, dict[str, Any], str | None], Awaitable[dict[str, Any]]]


class ApiFailure(Exception):
    """An error answer of the API: its code (``ValidationException``...), message and HTTP status."""

    def __init__(self, code: str, message: str, status: int) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status


class KeyLookup(Protocol):
    """The servekit home's access keys: a key id's secret and scope (``admin``/``invoke``), or ``None``."""

    def __call__(self, access_key_id: str) -> tuple[str, str] | None: ...
