"""CloudWatch Logs filter patterns for unstructured events, as FilterLogEvents reads them.

- ``ERROR`` matches events containing the term; ``ERROR Exception`` both terms (in any order);
- ``"Failed to load"`` the quoted phrase as written;
- ``?ERROR ?WARN`` either term (each ``?`` term is an alternative);
- ``-DEBUG`` events without the term (``ERROR -Exiting``);
- ``%regex%`` a regular expression (Python's syntax for what AWS's subset allows);
- an empty pattern (or ``""``) matches every event.

Terms match case-sensitively, anywhere in the message, as on AWS. JSON (``{ $.x = 1 }``) and space-delimited
(``[ip, user, ...]``) patterns are refused with a :class:`PatternError` rather than matched wrongly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["FilterPattern", "PatternError", "parse"]


class PatternError(ValueError):
    """A filter pattern servekit cannot read."""


@dataclass(frozen=True, slots=True)
class FilterPattern:
    required: tuple[str, ...] = ()
    any_of: tuple[str, ...] = ()
    excluded: tuple[str, ...] = ()
    regex: re.Pattern[str] | None = None

    def matches(self, message: str) -> bool:
        if any(t not in message for t in self.required):
            return False
        if self.any_of and not any(t in message for t in self.any_of):
            return False
        if any(t in message for t in self.excluded):
            return False
        return self.regex is None or self.regex.search(message) is not None

    @property
    def hint(self) -> str | None:
        """A substring every match contains (the longest required term), for a store to search first."""
        return max(self.required, key=len) if self.required else None


_TOKEN = re.compile(r'\s*([?-]?)(?:"((?:[^"\\]|\\.)*)"|(\S+))')


def parse(pattern: str | None) -> FilterPattern:
    text = (pattern or "").strip()
    if not text or text == '""':
        return FilterPattern()
    if text[0] in "{[":
        raise PatternError(
            "servekit matches terms, quoted phrases, ?alternatives, -exclusions and %regex% patterns; "
            "JSON and space-delimited filter patterns are not supported"
        )
    if len(text) >= 2 and text[0] == "%" and text[-1] == "%":
        try:
            return FilterPattern(regex=re.compile(text[1:-1]))
        except re.error as exc:
            raise PatternError(f"Invalid regular expression in the filter pattern: {exc}") from None
    required: list[str] = []
    any_of: list[str] = []
    excluded: list[str] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            break  # trailing white space
        pos = m.end()
        sign, quoted, bare = m.group(1), m.group(2), m.group(3)
        term = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else bare
        if not term:
            continue
        {"?": any_of, "-": excluded}.get(sign, required).append(term)
    return FilterPattern(tuple(required), tuple(any_of), tuple(excluded))
