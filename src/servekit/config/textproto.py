"""A small reader for protobuf text format, enough for TF Serving's config files.

It returns nested dicts whose values are always lists (text format allows any field to repeat); the
caller decides which fields are scalars. Errors carry the line and column.
"""

from __future__ import annotations

import re
from typing import Any

from servekit.errors import ConfigError

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+|\#[^\n]*)
  | (?P<str>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<num>[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?[fF]?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<punct>[{}:<>\[\],;])
    """,
    re.VERBOSE,
)

TextMessage = dict[str, list[Any]]


def _tokens(text: str, source: str) -> list[tuple[str, str, int]]:
    out: list[tuple[str, str, int]] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ConfigError(f"{source}:{_where(text, pos)}: unexpected character {text[pos]!r}")
        kind = m.lastgroup or ""
        if kind != "ws":
            out.append((kind, m.group(), pos))
        pos = m.end()
    return out


def _where(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"{line}:{col}"


def _unquote(raw: str) -> str:
    body = raw[1:-1]
    return body.encode("latin-1", "backslashreplace").decode("unicode_escape")


def parse_textproto(text: str, source: str = "<text>") -> TextMessage:
    toks = _tokens(text, source)
    i = 0

    def fail(msg: str) -> ConfigError:
        pos = toks[i][2] if i < len(toks) else len(text)
        return ConfigError(f"{source}:{_where(text, pos)}: {msg}")

    def scalar() -> Any:
        nonlocal i
        kind, val, _ = toks[i]
        if kind == "punct":
            raise fail(f"expected a value, found {val!r}")
        i += 1
        if kind == "str":
            s = _unquote(val)
            while i < len(toks) and toks[i][0] == "str":  # adjacent strings concatenate
                s += _unquote(toks[i][1])
                i += 1
            return s
        if kind == "num":
            v = val.rstrip("fF")
            return float(v) if any(c in v for c in ".eE") else int(v)
        return {"true": True, "false": False}.get(val, val)  # identifiers: booleans and enum names

    def message(closing: str | None) -> TextMessage:
        nonlocal i
        msg: TextMessage = {}
        while i < len(toks):
            kind, val, _ = toks[i]
            if closing is not None and kind == "punct" and val == closing:
                i += 1
                return msg
            if kind != "ident":
                raise fail(f"expected a field name, found {val!r}")
            name = val
            i += 1
            if i < len(toks) and toks[i][1] == ":":
                i += 1
            if i >= len(toks):
                raise fail(f"field {name!r} has no value")
            kind, val, _ = toks[i]
            if kind == "punct" and val in "{<":
                i += 1
                msg.setdefault(name, []).append(message("}" if val == "{" else ">"))
            elif kind == "punct" and val == "[":
                i += 1
                while i < len(toks) and toks[i][1] != "]":
                    msg.setdefault(name, []).append(scalar())
                    if i < len(toks) and toks[i][1] == ",":
                        i += 1
                if i >= len(toks):
                    raise fail(f"list for {name!r} is not closed")
                i += 1
            else:
                msg.setdefault(name, []).append(scalar())
            if i < len(toks) and toks[i][1] in (",", ";"):
                i += 1
        if closing is not None:
            raise fail(f"missing {closing!r}")
        return msg

    return message(None)
