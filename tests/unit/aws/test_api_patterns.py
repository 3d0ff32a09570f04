"""Java regular expressions from botocore's models, in Python."""

from __future__ import annotations

import pytest

from servekit.aws.patterns import compile_pattern, translate


@pytest.mark.parametrize(
    ("pattern", "good", "bad"),
    [
        ("\\p{ASCII}*", ["", "a=b; c", "\x00\x7f"], ["é", "\u2603"]),
        ("\\A\\S[\\p{Print}]*\\z", ["model.tar.gz", "a b"], [" lead", "tab\tinside", "end\n"]),
        ("arn:[\\p{Alnum}\\-]+:lambda:.*", ["arn:aws-cn:lambda:x"], ["arn:aws_x:lambda:x"]),
        ("[\\p{L}\\p{M}\\p{Z}\\p{S}\\p{N}\\p{P}]*", ["Grüße, 世界 +1 ½"], ["a\x00", "tab\t"]),
        ("([\\p{L}\\p{Z}\\p{N}_.:\\/=+\\-@]*)${1,256}", ["team: ml/ops=1@x"], ["semi;colon"]),
        (
            "[\\u0020-\\uD7FF\\uE000-\\uFFFD\\uD800\\uDC00-\\uDBFF\\uDFFF\\r\\n\\t]*",
            ["line\nnext \U0001f600"],
            ["\x01", "\ufffe"],
        ),
        ("^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}", ["a", "a--b"], ["a-", "bad name!"]),
    ],
)
def test_java_patterns_match_as_java_would(pattern: str, good: list[str], bad: list[str]) -> None:
    compiled = compile_pattern(pattern)
    assert compiled is not None, translate(pattern)
    for text in good:
        assert compiled.fullmatch(text), (pattern, text)
    for text in bad:
        assert not compiled.fullmatch(text), (pattern, text)


def test_unknown_classes_are_not_compiled() -> None:
    assert compile_pattern("\\p{Javascript}+") is None
    assert compile_pattern("(unbalanced") is None
