"""``--auth_token_file`` parsing and the serve defaults that go with it: tokens by scope, errors that name the
line but never the token, no token in a repr; loopback by default; connection limits validated."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from servekit.config.loading import load_auth_token_file, parse_auth_tokens
from servekit.config.models import AuthTokens, ConnectionLimits, ServerConfig
from servekit.errors import ConfigError

A = "a" * 20
B = "b" * 20
C = "c" * 20


def test_scoped_and_plain_lines() -> None:
    text = f"# tokens\n\ninference:{A}\nadmin: {B}  \n  {C}\n"
    tokens = parse_auth_tokens(text, "t")
    assert tokens.inference == {A, C}
    assert tokens.admin == {B, C}


def test_a_token_that_merely_contains_a_colon_is_plain() -> None:
    token = "team:" + "x" * 20
    assert parse_auth_tokens(token, "t").inference == {token}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no bearer tokens"),
        ("# only a comment\n", "no bearer tokens"),
        ("admin:\n", "line 1: no token after admin:"),
        ("short\n", "at least 16 characters"),
        (f"inference:{A} {B}\n", "without spaces"),
        ("é" * 20 + "\n", "printable ASCII"),
    ],
)
def test_bad_files_name_the_problem_but_never_the_token(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        parse_auth_tokens(text, "tokens.txt")
    assert str(err.value).startswith("tokens.txt")
    assert A not in str(err.value) and "short" not in str(err.value)


def test_load_reads_the_file_and_reports_a_missing_one(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"{A}\n")
    assert load_auth_token_file(path).admin == {A}
    with pytest.raises(ConfigError, match="cannot read auth token file"):
        load_auth_token_file(tmp_path / "missing")
    path.write_bytes(b"\xff" * 20)
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_auth_token_file(path)


def test_tokens_never_show_in_a_repr() -> None:
    tokens = AuthTokens(frozenset({A}), frozenset({B}), "file")
    assert A not in repr(tokens) and B not in repr(tokens)
    assert A not in repr(ServerConfig(auth=tokens))


def test_serve_defaults_to_loopback_without_auth_and_bounded_connections() -> None:
    config = ServerConfig()
    assert config.host == "127.0.0.1"
    assert config.auth is None
    limits = config.connections
    assert (limits.idle_timeout_seconds, limits.header_timeout_seconds, limits.body_timeout_seconds) == (10, 10, 60)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"idle_timeout_seconds": -1},
        {"header_timeout_seconds": math.nan},
        {"body_timeout_seconds": -0.5},
        {"max_connections": -1},
    ],
)
def test_connection_limits_are_validated(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match=next(iter(kwargs))):
        ConnectionLimits(**kwargs)  # type: ignore[arg-type]
