"""The JSON nesting check that keeps the standard library's recursive parser from deciding by stack depth."""

from __future__ import annotations

import pytest

from servekit._utils.jsondepth import nests_deeper_than
from servekit.serving.runtime.handler import default_input_fn


@pytest.mark.parametrize(
    ("body", "deeper"),
    [
        (b"[" * 11 + b"]" * 11, True),
        (b"[" * 10 + b"]" * 10, False),
        (b'{"a": [{"b": [[1]]}]}', False),
        (b'["' + b"[" * 50 + b'"]', False),  # brackets inside a string
        (b'["\\"' + b"[" * 50 + b'"]', False),  # an escaped quote does not end the string
        (b'["\\\\"' + b"[" * 50 + b"]", True),  # an escaped backslash does: the brackets after it count
        ('["é", ' + "[" * 11 + "]" * 11 + "]", True),  # text, not bytes
    ],
)
def test_depth(body: bytes | str, deeper: bool) -> None:
    assert nests_deeper_than(body, 10) is deeper


def test_the_default_handler_refuses_deep_json_before_parsing_it() -> None:
    with pytest.raises(ValueError, match="more than 1024 levels deep"):
        default_input_fn(b"[" * 1100 + b"]" * 1100, "application/json")
    assert default_input_fn(b"[[1, 2]]", "application/json").tolist() == [[1, 2]]
