"""Keyset pagination for SageMaker-style listings (``SortBy``, ``SortOrder``, ``MaxResults``, ``NextToken``).

A page ends at a cut named by the last row's sort key and its ``seq`` (the table's ever-growing integer key, which
breaks ties), never by an offset: rows inserted between two calls neither repeat nor push others off a page. The
token is opaque to clients (URL-safe base64 of JSON) and carries a fingerprint of the listing it came from, so a
token replayed with other filters or another sort is refused instead of silently skipping rows.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import orjson

from servekit.state.connection import Connection

T = TypeVar("T")


class InvalidNextToken(ValueError):
    """A ``NextToken`` this listing did not issue (garbled, or from a listing with other filters or sort)."""


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: list[T]
    next_token: str | None  # None on the last page


@dataclass(frozen=True, slots=True)
class Listing:
    """One listing query: the filters (SQL conditions and their arguments), the sort and the page size."""

    where: tuple[str, ...] = ()
    args: tuple[Any, ...] = ()
    sort_by: str = "CreationTime"
    sort_order: str = "Descending"
    max_results: int = 10
    next_token: str | None = None


def keyset_page(
    conn: Connection, table: str, columns: str, sort_columns: Mapping[str, str], listing: Listing
) -> Page[tuple[Any, ...]]:
    """One page of ``table``'s rows (``columns``, which must start with ``seq``). ``sort_columns`` maps each
    allowed ``SortBy`` to its column; a bad ``SortBy``, ``SortOrder`` or ``MaxResults`` raises ``ValueError``."""
    column = sort_columns.get(listing.sort_by)
    if column is None:
        raise ValueError(f"SortBy must be one of {', '.join(sort_columns)}, not {listing.sort_by!r}")
    if listing.sort_order not in ("Ascending", "Descending"):
        raise ValueError(f"SortOrder must be Ascending or Descending, not {listing.sort_order!r}")
    if listing.max_results < 1:
        raise ValueError(f"MaxResults must be at least 1, not {listing.max_results}")
    query = _fingerprint(table, listing)
    where = list(listing.where)
    args = list(listing.args)
    op = ">" if listing.sort_order == "Ascending" else "<"
    if listing.next_token is not None:
        last_key, last_seq = _decode_token(listing.next_token, query)
        where.append(f"({column} {op} ? OR ({column} = ? AND seq {op} ?))")
        args += [last_key, last_key, last_seq]
    direction = "ASC" if listing.sort_order == "Ascending" else "DESC"
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    sql = f"SELECT {columns}, {column} FROM {table} {clause} ORDER BY {column} {direction}, seq {direction} LIMIT ?"
    rows = conn.execute(sql, (*args, listing.max_results + 1)).fetchall()
    more = len(rows) > listing.max_results
    rows = rows[: listing.max_results]
    token = _encode_token(query, rows[-1][-1], int(rows[-1][0])) if more else None
    return Page([tuple(r[:-1]) for r in rows], token)


def where_set(*pairs: tuple[str, Any]) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """The ``WHERE`` clauses and arguments of a listing's filters: each ``(clause, value)`` pair whose value was
    given (not None), in order."""
    where = tuple(clause for clause, value in pairs if value is not None)
    args = tuple(value for _, value in pairs if value is not None)
    return where, args


def _fingerprint(table: str, listing: Listing) -> str:
    """What a token is valid for: the same table, filters and sort (not the page size: a client may change it)."""
    doc = orjson.dumps([table, list(listing.where), list(listing.args), listing.sort_by, listing.sort_order])
    return hashlib.sha256(doc).hexdigest()[:16]


def _encode_token(query: str, key: Any, seq: int) -> str:
    return base64.urlsafe_b64encode(orjson.dumps({"q": query, "k": key, "s": seq})).decode().rstrip("=")


def _decode_token(token: str, query: str) -> tuple[Any, int]:
    try:
        doc = orjson.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        key, seq, issued_for = doc["k"], int(doc["s"]), doc["q"]
    except (binascii.Error, ValueError, TypeError, KeyError):  # orjson.JSONDecodeError is a ValueError
        raise InvalidNextToken("the NextToken is not one this listing issued") from None
    if issued_for != query or isinstance(key, bool) or not isinstance(key, (str, int, float)):
        raise InvalidNextToken("the NextToken belongs to a listing with other filters or another sort order")
    return key, seq


def page_of(rows: Page[tuple[Any, ...]], make: Callable[[tuple[Any, ...]], T]) -> Page[T]:
    """``rows`` with each row turned into its typed record by ``make``."""
    return Page([make(r) for r in rows.items], rows.next_token)


__all__ = ["InvalidNextToken", "Listing", "Page", "keyset_page", "page_of"]
