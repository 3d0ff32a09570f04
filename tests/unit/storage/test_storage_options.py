"""Per-scheme options reach the scheme's filesystem (an S3-compatible endpoint, say)."""

from __future__ import annotations

from typing import Any

import fsspec
from fsspec.implementations.memory import MemoryFileSystem

from servekit.storage import Storage


class Recording(MemoryFileSystem):
    protocol = "rec"
    cachable = False  # a new instance per call, so each call's options are seen
    seen: list[dict[str, Any]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        Recording.seen.append(dict(kwargs))
        super().__init__()


def test_options_of_a_scheme_are_handed_to_its_filesystem() -> None:
    fsspec.register_implementation("rec", Recording, clobber=True)
    Recording.seen.clear()
    storage = Storage(options={"rec": {"endpoint_url": "http://127.0.0.1:9000"}})
    storage.exists("rec://bucket/key")
    assert Recording.seen == [{"endpoint_url": "http://127.0.0.1:9000"}]
    Recording.seen.clear()
    Storage().exists("rec://bucket/key")  # no options for it: none passed
    assert Recording.seen == [{}]
