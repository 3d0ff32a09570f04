"""How deep a pipeline definition nests, counted before it is parsed (CreatePipeline refuses a deeper one at once)."""

from __future__ import annotations

# How deep a definition may nest its JSON or YAML flow collections: real ones nest about ten levels; the parser and
# the expression evaluator recurse once a level, so a deeper document would end in a RecursionError (a 500 with a
# traceback thousands of lines long) instead of a clear refusal.
MAX_DEPTH = 100


def nesting_depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` outside quoted strings (JSON, YAML flow style): one pass, no recursion."""
    depth = deepest = 0
    quote = ""
    escaped = False
    for ch in text:
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\" and quote == '"':
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(0, depth - 1)
    return deepest
