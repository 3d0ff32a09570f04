"""BearerAuth on bare ASGI scopes: which paths are open, which token scope each needs, and the Authorization
header taken out of an admitted request so nothing downstream (logs, capture, handler models) sees it."""

from __future__ import annotations

from typing import Any

import pytest

from servekit.config.models import AuthTokens
from servekit.serving.protocols.auth import BearerAuth
from servekit.serving.protocols.http import AUTHENTICATED_KEY

INFERENCE = "i" * 24
ADMIN = "a" * 24
AUTH = BearerAuth(AuthTokens(frozenset({INFERENCE}), frozenset({ADMIN})))


def scope(path: str, token: str | None = None, scheme: bytes = b"Bearer") -> dict[str, Any]:
    headers = [(b"host", b"x")]
    if token is not None:
        headers.append((b"authorization", scheme + b" " + token.encode()))
    return {"type": "http", "path": path, "headers": headers}


@pytest.mark.parametrize("path", ["/v2/health/live", "/v2/health/ready", "/ping"])
def test_health_paths_are_open(path: str) -> None:
    assert AUTH.check(scope(path), inference=False) is None


def test_an_admitted_request_is_marked_and_loses_its_authorization_header() -> None:
    s = scope("/v1/models/m:predict", INFERENCE)
    assert AUTH.check(s, inference=True) is None
    assert s[AUTHENTICATED_KEY] is True
    assert s["headers"] == [(b"host", b"x")]


@pytest.mark.parametrize(
    ("token", "inference", "status"),
    [
        (None, True, 401),
        ("x" * 24, True, 401),
        (INFERENCE[:-1], True, 401),  # a prefix is not the token
        (ADMIN, True, 403),
        (INFERENCE, False, 403),
        (ADMIN, False, None),
    ],
)
def test_scopes(token: str | None, inference: bool, status: int | None) -> None:
    s = scope("/anything", token)
    refused = AUTH.check(s, inference=inference)
    assert (refused.status_code if refused is not None else None) == status
    if refused is not None:
        assert refused.headers["www-authenticate"].startswith('Bearer realm="servekit"')
        assert AUTHENTICATED_KEY not in s


def test_the_scheme_is_case_insensitive_and_others_are_refused() -> None:
    assert AUTH.check(scope("/metrics", ADMIN, b"bearer"), inference=False) is None
    refused = AUTH.check(scope("/metrics", ADMIN, b"Basic"), inference=False)
    assert refused is not None and refused.status_code == 401
