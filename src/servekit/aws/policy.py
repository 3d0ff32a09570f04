"""IAM policy documents, evaluated as AWS evaluates an identity's policies for one request: an explicit ``Deny``
that matches wins, else an ``Allow`` that matches allows, else the request is denied (implicitly).

What is matched: ``Action``/``NotAction`` (``service:Operation``, case-insensitive, ``*`` and ``?`` wildcards) and
``Resource``/``NotResource`` (ARNs, case-sensitive, the same wildcards). ``Condition`` blocks are not evaluated:
:func:`check` refuses a document that has one, so a policy never means more than it says here.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

VERSION = "2012-10-17"
Document = Mapping[str, Any]


class PolicyError(ValueError):
    """A policy document servekit cannot evaluate as written (the message says what is wrong)."""


@functools.lru_cache(maxsize=1024)
def _pattern(glob: str, fold: bool) -> re.Pattern[str]:
    body = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in glob)
    return re.compile(body, re.IGNORECASE | re.DOTALL if fold else re.DOTALL)


def _listed(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value or [])


def _matches(globs: Iterable[str], value: str, fold: bool) -> bool:
    return any(_pattern(g, fold).fullmatch(value) for g in globs)


def _statement_matches(st: Mapping[str, Any], action: str, resource: str) -> bool:
    if "Action" in st:
        acted = _matches(_listed(st["Action"]), action, True)
    else:
        acted = not _matches(_listed(st.get("NotAction")), action, True)
    if "Resource" in st:
        placed = _matches(_listed(st["Resource"]), resource, False)
    else:
        placed = "NotResource" in st and not _matches(_listed(st["NotResource"]), resource, False)
    return acted and placed


def statements(documents: Sequence[Document]) -> list[Mapping[str, Any]]:
    return [st for doc in documents for st in _listed_statements(doc.get("Statement"))]


def _listed_statements(value: Any) -> list[Mapping[str, Any]]:
    return [value] if isinstance(value, Mapping) else list(value or [])


def allowed(documents: Sequence[Document], action: str, resource: str = "*") -> bool:
    """Whether ``documents`` allow ``action`` (``s3:GetObject``) on ``resource`` (an ARN, or ``*``)."""
    allow = False
    for st in statements(documents):
        if _statement_matches(st, action, resource):
            if st.get("Effect") == "Deny":
                return False
            allow = True
    return allow


def check(document: Any) -> Document:
    """``document`` if it is a policy servekit evaluates exactly; :class:`PolicyError` naming the problem."""
    if not isinstance(document, Mapping):
        raise PolicyError("a policy document is a JSON object with a Statement")
    sts = _listed_statements(document.get("Statement"))
    if not sts:
        raise PolicyError("the policy has no Statement")
    for i, st in enumerate(sts):
        where = f"Statement {i + 1}"
        if not isinstance(st, Mapping):
            raise PolicyError(f"{where} is not an object")
        if st.get("Effect") not in ("Allow", "Deny"):
            raise PolicyError(f"{where}: Effect must be Allow or Deny")
        if ("Action" in st) == ("NotAction" in st):
            raise PolicyError(f"{where}: give Action or NotAction (one of them)")
        if ("Resource" in st) == ("NotResource" in st):
            raise PolicyError(f"{where}: give Resource or NotResource (one of them)")
        if "Condition" in st:
            raise PolicyError(f"{where}: servekit does not evaluate Condition blocks; leave it out")
        if "Principal" in st or "NotPrincipal" in st:
            raise PolicyError(f"{where}: an identity policy names no Principal")
        for key in ("Action", "NotAction", "Resource", "NotResource"):
            if key in st and not all(isinstance(v, str) for v in _listed(st[key])):
                raise PolicyError(f"{where}: {key} must be a string or a list of strings")
    return document
