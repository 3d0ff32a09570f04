"""Scalars that arrive as text in URLs and headers: version numbers and byte counts."""

from __future__ import annotations

from servekit.errors import invalid

# A version or a length longer than this is no number a client means; int() of a huge digit string is also
# refused by Python (more than 4,300 digits), so cap it well before that.
_MAX_DIGITS = 18


def parse_count(raw: str, what: str) -> int:
    """A non-negative integer written in ASCII digits (``isdigit`` alone admits '²' and other Unicode digits)."""
    if not raw or len(raw) > _MAX_DIGITS or not (raw.isascii() and raw.isdigit()):
        raise invalid(f"{what} {raw[:40]!r} is not a non-negative integer")
    return int(raw)
