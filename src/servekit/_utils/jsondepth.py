"""How deep a JSON text nests, found without parsing it.

The standard library's parser recurses once per level, so whether a deeply nested body raises ``RecursionError`` or
parses depends on the recursion limit and on how deep the calling thread's stack already is: a 1,000-level body may
be refused in one thread and accepted in another. Decoders that fall back to it check the depth first, so the
answer to a body is the same wherever it is decoded.
"""

from __future__ import annotations

import re

# The characters that matter for nesting: brackets, and the quotes and backslashes that hide brackets in strings.
_STRUCTURE = re.compile(rb'[\[\]{}"\\]')


def nests_deeper_than(body: bytes | str, limit: int) -> bool:
    """Whether ``body`` opens more than ``limit`` arrays/objects at once (brackets inside strings don't count).
    Malformed text is the parser's to refuse: this only counts."""
    data = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    depth = 0
    in_string = False
    escaped = False
    last = -2
    for match in _STRUCTURE.finditer(data):
        ch = match.group()
        pos = match.start()
        if in_string:
            if escaped and pos == last + 1:
                escaped = False
            elif ch == b"\\":
                escaped, last = True, pos
            elif ch == b'"':
                in_string = False
            continue
        if ch == b'"':
            in_string, escaped = True, False
        elif ch in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        elif ch in (b"]", b"}"):
            depth -= 1
    return False
