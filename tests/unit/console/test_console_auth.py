"""Console sessions: derived from the access key, refused when forged, expired, or the key is gone."""

from __future__ import annotations

from servekit.console import auth

KEYS = {"AKIAADMIN": ("s3cret-admin", "admin"), "AKIAINVOKE": ("s3cret-invoke", "invoke")}


def lookup(key_id: str) -> tuple[str, str] | None:
    return KEYS.get(key_id)


def test_a_cookie_issued_for_a_key_verifies_and_carries_a_csrf_token() -> None:
    cookie = auth.issue("AKIAADMIN", "s3cret-admin", now=1000.0, nonce="n1")
    s = auth.verify(lookup, cookie, now=1500.0)
    assert s is not None and s.access_key_id == "AKIAADMIN"
    assert auth.csrf_ok(s, s.csrf)
    assert not auth.csrf_ok(s, "")
    assert not auth.csrf_ok(s, None)
    assert not auth.csrf_ok(None, s.csrf)
    other = auth.verify(lookup, auth.issue("AKIAADMIN", "s3cret-admin", now=1000.0, nonce="n2"), now=1500.0)
    assert other is not None and other.csrf != s.csrf  # one token per session


def test_forged_expired_malformed_and_removed_key_cookies_are_refused() -> None:
    good = auth.issue("AKIAADMIN", "s3cret-admin", now=1000.0, nonce="n1")
    forged = auth.issue("AKIAADMIN", "guessed", now=1000.0, nonce="n1")
    assert auth.verify(lookup, forged, now=1001.0) is None
    assert auth.verify(lookup, good, now=1000.0 + auth.DEFAULT_TTL_S + 1) is None
    assert auth.verify(lookup, good, now=999.0) is None  # issued in the future
    for bad in ("", None, "a.b.c", "AKIAADMIN.x.n1.mac", good + ".x"):
        assert auth.verify(lookup, bad, now=1001.0) is None
    assert auth.verify(lambda _: None, good, now=1001.0) is None  # the key was removed from the home


def test_login_needs_the_right_secret_of_an_admin_key() -> None:
    assert auth.check_login(lookup, "AKIAADMIN", "s3cret-admin") is None
    assert auth.check_login(lookup, " AKIAADMIN ", "s3cret-admin\n") is None
    wrong = auth.check_login(lookup, "AKIAADMIN", "nope")
    assert wrong == auth.check_login(lookup, "AKIANOBODY", "nope")  # no hint which part was wrong
    assert "admin key" in (auth.check_login(lookup, "AKIAINVOKE", "s3cret-invoke") or "")
    invoke_cookie = auth.issue("AKIAINVOKE", "s3cret-invoke", now=1000.0)
    assert auth.verify(lookup, invoke_cookie, now=1001.0) is None
