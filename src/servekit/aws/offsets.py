"""NextToken paging by position, for listings computed whole in memory (steps of one execution, jobs read from the
home); listings over the state's tables page by key instead (``servekit.state.paging``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from servekit.aws.errors import validation_exception

T = TypeVar("T")


def offset_page(items: Sequence[T], next_token: object, size: int) -> tuple[Sequence[T], str | None]:
    """The ``size`` items from the position ``next_token`` names (the start when it is empty), and the token of
    the next page (None after the last); a token this paging did not issue is a ValidationException."""
    text = str(next_token or "0")
    if not text.isdigit():
        raise validation_exception("the NextToken is not one this listing issued")
    start = int(text)
    end = start + size
    return items[start:end], (str(end) if end < len(items) else None)
