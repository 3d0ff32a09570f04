"""Small pure HTML builders: every value passes through :func:`html.escape` here, so a page function never
writes a caller's string into markup by hand."""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

NAV = (
    ("/console/", "Endpoints"),
    ("/console/registry", "Models & registry"),
    ("/console/monitoring", "Monitoring"),
    ("/console/jobs", "Batch jobs"),
    ("/console/processing", "Processing"),
    ("/console/training", "Training"),
    ("/console/tuning", "Tuning"),
    ("/console/pipelines", "Pipelines"),
)


def esc(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def when(epoch: object) -> str:
    """An API timestamp (epoch seconds in the JSON protocols) as UTC text; anything else as given."""
    if isinstance(epoch, (int, float)):
        return datetime.fromtimestamp(float(epoch), UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return "" if epoch is None else str(epoch)


def duration(start: object, end: object) -> str:
    """The time from ``start`` to ``end`` (API timestamps, epoch seconds) as ``1 h 02 min``, ``3 min 05 s`` or
    ``45 s``; ``—`` unless both are known."""
    if not isinstance(start, (int, float)) or not isinstance(end, (int, float)) or end < start:
        return "—"
    seconds = round(float(end) - float(start))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def money(value: object) -> str:
    return f"${float(value):,.3f}/h" if isinstance(value, (int, float)) else "—"


def weight(value: object) -> str:
    return f"{float(value):g}" if isinstance(value, (int, float)) else "—"


def badge(status: object) -> str:
    """A status word with a class for its colour (text and colour both say it: colour is never the only cue)."""
    word = str(status or "")
    low = word.lower()
    kind = "neutral"
    if low in ("inservice", "completed", "approved", "ok", "successful", "scheduled", "succeeded"):
        kind = "good"
    elif low in ("failed", "rejected", "alarm", "updaterollbackfailed", "outofservice", "completedwithviolations"):
        kind = "bad"
    elif low in (
        "creating",
        "updating",
        "deleting",
        "rollingback",
        "systemupdating",
        "inprogress",
        "pending",
        "executing",
        "starting",
        "stopping",
    ):
        kind = "busy"
    elif low in ("pendingmanualapproval", "insufficient_data", "stopped"):
        kind = "warn"
    elif low == "completedwitherrors":  # finished, but records failed: neither a success nor a failure
        kind = "partial"
    return f'<span class="badge badge-{kind}">{esc(word)}</span>'


def table(caption: str, headers: Sequence[str], rows: Iterable[Sequence[str]], empty: str = "None yet.") -> str:
    """A table whose cells are already-safe HTML (built with :func:`esc` and friends); a caption for screen readers."""
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    if not body:
        return f'<p class="empty">{esc(caption)}: {esc(empty)}</p>'
    head = "".join(f'<th scope="col">{esc(h)}</th>' for h in headers)
    return f"<table><caption>{esc(caption)}</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def facts(items: Iterable[tuple[str, str]]) -> str:
    """A definition list of (name, already-safe HTML value) pairs: a page's facts about one thing."""
    rows = "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in items)
    return f'<dl class="facts">{rows}</dl>'


def link(href: str, text: object) -> str:
    return f'<a href="{esc(href)}">{esc(text)}</a>'


def csrf_field(token: str) -> str:
    return f'<input type="hidden" name="csrf" value="{esc(token)}">'


def page(title: str, body: str, *, active: str = "", user: str | None = None, csrf: str | None = None) -> str:
    """The whole document: skip link, navigation, who is logged in, the body, the console's script."""
    current = ' aria-current="page"'
    items = "".join(f'<li><a href="{esc(h)}"{current if h == active else ""}>{esc(t)}</a></li>' for h, t in NAV)
    if user is not None and csrf is not None:
        who = (
            f'<form method="post" action="/console/logout" class="who">{csrf_field(csrf)}'
            f'<span>Signed in as <code>{esc(user)}</code></span> <button type="submit">Sign out</button></form>'
        )
    else:
        who = '<a class="who" href="/console/login">Sign in to act</a>'
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'  # no favicon request (a 404 in every browser console)
        f"<title>{esc(title)} · servekit console</title>"
        '<link rel="stylesheet" href="/console/static/uPlot.min.css">'
        '<link rel="stylesheet" href="/console/static/console.css">'
        "</head><body>"
        '<a class="skip" href="#main">Skip to content</a>'
        f'<header><span class="brand">servekit console</span><nav aria-label="Console"><ul>{items}</ul></nav>'
        f"{who}</header>"
        f'<main id="main" tabindex="-1"><h1>{esc(title)}</h1>{body}</main>'
        '<script src="/console/static/uPlot.iife.min.js"></script>'
        '<script src="/console/static/console.js"></script>'
        "</body></html>"
    )


def json_script(element_id: str, data: Any) -> str:
    """Data for the page's script, inert (``application/json``) with ``<`` escaped so it cannot close the tag."""
    text = json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")
    return f'<script type="application/json" id="{esc(element_id)}">{text}</script>'
