"""Console sessions and CSRF tokens: pure functions of a key's secret, a nonce and an injected time.

A session cookie is ``<key id>.<issued>.<nonce>.<mac>`` with ``mac = HMAC-SHA256(secret access key, key id|issued|
nonce)``: derived from the access key the user logged in with, so removing the key from the home (``servekit``'s
credentials file) ends its sessions at once, and nothing but the key's owner can forge one. The CSRF token of a
session is ``HMAC(secret, "csrf"|nonce)``: every state-changing form carries it, and a POST without the right one
is refused. Nothing here stores a session server-side.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from servekit.console.client import KeyLookup

COOKIE = "servekit_console"
LOGIN_COOKIE = "servekit_console_login"  # the login form's own CSRF token (double submit), before any session
DEFAULT_TTL_S = 12 * 3600


@dataclass(frozen=True)
class Session:
    access_key_id: str
    issued: int
    nonce: str
    csrf: str


def _mac(secret: str, *parts: str) -> str:
    return hmac.new(secret.encode(), "|".join(parts).encode(), hashlib.sha256).hexdigest()


def issue(access_key_id: str, secret: str, now: float, nonce: str | None = None) -> str:
    """A session cookie value for a key whose secret the caller has just checked."""
    nonce = nonce or secrets.token_hex(16)
    issued = str(int(now))
    return ".".join((access_key_id, issued, nonce, _mac(secret, access_key_id, issued, nonce)))


def check_login(keys: KeyLookup, access_key_id: str, secret: str) -> str | None:
    """``None`` when the pair may log in, else why not (the same words for an unknown key and a wrong secret)."""
    found = keys(access_key_id.strip())
    if found is None or not hmac.compare_digest(found[0].encode(), secret.strip().encode()):
        return "The access key id or secret is not right."
    if found[1] != "admin":
        return "This access key is limited to invoking endpoints; log in with an admin key to act in the console."
    return None


def verify(keys: KeyLookup, cookie: str | None, now: float, ttl_s: int = DEFAULT_TTL_S) -> Session | None:
    """The session a cookie holds, or ``None`` (absent, malformed, forged, expired, or its key removed)."""
    if not cookie:
        return None
    parts = cookie.split(".")
    if len(parts) != 4:
        return None
    key_id, issued, nonce, mac = parts
    if not issued.isdigit() or not (0 <= now - int(issued) <= ttl_s):
        return None
    found = keys(key_id)
    if found is None or found[1] != "admin":
        return None
    if not hmac.compare_digest(mac, _mac(found[0], key_id, issued, nonce)):
        return None
    return Session(key_id, int(issued), nonce, _mac(found[0], "csrf", nonce))


def csrf_ok(session: Session | None, token: str | None) -> bool:
    return session is not None and token is not None and hmac.compare_digest(session.csrf, token)
