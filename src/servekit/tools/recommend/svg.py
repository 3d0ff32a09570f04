"""Small inline SVG charts (line and bar) for the HTML report: no JavaScript, no external files, so the report is
one file that opens anywhere. Text is escaped; numbers are laid out on "nice" ticks (1, 2, 5 x 10^k)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html import escape

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
_W, _H = 560, 300
_LEFT, _RIGHT, _TOP, _BOTTOM = 62, 16, 30, 44


@dataclass
class Series:
    name: str
    points: list[tuple[float, float]]
    color: str = PALETTE[0]
    dashed: bool = False
    # points drawn hollow (e.g. phases that broke the SLO), by index
    hollow: set[int] = field(default_factory=set)


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0.0, 1.0]
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(1, count)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(s * mag for s in (1, 2, 2.5, 5, 10) if s * mag >= raw)
    start = math.floor(lo / step) * step
    ticks = []
    v = start
    while v <= hi + step * 1e-9:
        ticks.append(round(v, 10))
        v += step
    if ticks[-1] < hi:
        ticks.append(round(v, 10))
    return ticks


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v / 1000:g}k"
    if abs(v) >= 1:
        return f"{v:g}"
    return f"{v:.3g}"


Scale = Callable[[float], float]


def _frame(title: str, x_label: str, y_label: str, xt: list[float], yt: list[float], sx: Scale, sy: Scale) -> str:
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {_H}" width="{_W}" height="{_H}" '
        f'role="img" aria-label="{escape(title)}" font-family="sans-serif" font-size="11">',
        f'<text x="{_W / 2}" y="16" text-anchor="middle" font-size="13" font-weight="bold">{escape(title)}</text>',
    ]
    for y in yt:
        py = sy(y)
        parts.append(f'<line x1="{_LEFT}" y1="{py:.1f}" x2="{_W - _RIGHT}" y2="{py:.1f}" stroke="#e5e5e5"/>')
        parts.append(f'<text x="{_LEFT - 6}" y="{py + 4:.1f}" text-anchor="end">{_fmt(y)}</text>')
    for x in xt:
        px = sx(x)
        parts.append(f'<line x1="{px:.1f}" y1="{_H - _BOTTOM}" x2="{px:.1f}" y2="{_H - _BOTTOM + 4}" stroke="#555"/>')
        parts.append(f'<text x="{px:.1f}" y="{_H - _BOTTOM + 16}" text-anchor="middle">{_fmt(x)}</text>')
    parts.append(
        f'<line x1="{_LEFT}" y1="{_H - _BOTTOM}" x2="{_W - _RIGHT}" y2="{_H - _BOTTOM}" stroke="#555"/>'
        f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{_H - _BOTTOM}" stroke="#555"/>'
        f'<text x="{(_LEFT + _W - _RIGHT) / 2}" y="{_H - 8}" text-anchor="middle">{escape(x_label)}</text>'
        f'<text transform="translate(14 {(_TOP + _H - _BOTTOM) / 2}) rotate(-90)" text-anchor="middle">'
        f"{escape(y_label)}</text>"
    )
    return "".join(parts)


def line_chart(
    title: str,
    series: list[Series],
    x_label: str,
    y_label: str,
    hlines: Sequence[tuple[float, str]] = (),
    vlines: Sequence[tuple[float, str]] = (),
) -> str:
    """Lines with markers; ``hlines``/``vlines`` are labelled reference lines (an SLO, an R_max)."""
    xs = [x for s in series for x, _ in s.points] + [x for x, _ in vlines]
    ys = [y for s in series for _, y in s.points] + [y for y, _ in hlines]
    if not xs or not ys:
        return _empty(title)
    xt = nice_ticks(min(0.0, min(xs)), max(xs))
    yt = nice_ticks(0.0, max(ys) * 1.05)
    x0, x1, y0, y1 = xt[0], xt[-1], yt[0], yt[-1]

    def sx(x: float) -> float:
        return _LEFT + (x - x0) / ((x1 - x0) or 1) * (_W - _LEFT - _RIGHT)

    def sy(y: float) -> float:
        return _H - _BOTTOM - (y - y0) / ((y1 - y0) or 1) * (_H - _TOP - _BOTTOM)

    parts = [_frame(title, x_label, y_label, xt, yt, sx, sy)]
    for y, label in hlines:
        parts.append(
            f'<line x1="{_LEFT}" y1="{sy(y):.1f}" x2="{_W - _RIGHT}" y2="{sy(y):.1f}" stroke="#000" '
            f'stroke-dasharray="6 4"/><text x="{_W - _RIGHT - 4}" y="{sy(y) - 4:.1f}" text-anchor="end">'
            f"{escape(label)}</text>"
        )
    for x, label in vlines:
        parts.append(
            f'<line x1="{sx(x):.1f}" y1="{_TOP}" x2="{sx(x):.1f}" y2="{_H - _BOTTOM}" stroke="#2ca02c" '
            f'stroke-dasharray="3 3"/><text x="{sx(x) + 4:.1f}" y="{_TOP + 10}">{escape(label)}</text>'
        )
    for s in series:
        pts = sorted(s.points)
        order = sorted(range(len(s.points)), key=lambda i: s.points[i])
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        dash = ' stroke-dasharray="5 3"' if s.dashed else ""
        parts.append(f'<polyline points="{path}" fill="none" stroke="{s.color}" stroke-width="2"{dash}/>')
        for i in order:
            x, y = s.points[i]
            fill = "#fff" if i in s.hollow else s.color
            parts.append(
                f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3.5" fill="{fill}" stroke="{s.color}">'
                f"<title>{escape(s.name)}: {_fmt(x)}, {y:.3g}</title></circle>"
            )
    parts.append(_legend([(s.name, s.color, s.dashed) for s in series]))
    parts.append("</svg>")
    return "".join(parts)


def _legend(items: list[tuple[str, str, bool]]) -> str:
    out = []
    x: float = _LEFT + 8
    y: float = _TOP + 8
    for name, color, dashed in items:
        width = 28 + 6.5 * len(name)
        if x + width > _W - _RIGHT and x > _LEFT + 8:  # next row
            x, y = _LEFT + 8, y + 14
        dash = ' stroke-dasharray="5 3"' if dashed else ""
        out.append(
            f'<line x1="{x}" y1="{y}" x2="{x + 16}" y2="{y}" stroke="{color}" stroke-width="2"{dash}/>'
            f'<text x="{x + 20}" y="{y + 4}">{escape(name)}</text>'
        )
        x += width
    return "".join(out)


def bar_chart(title: str, bars: list[tuple[str, float | None, str]], y_label: str) -> str:
    """One bar per (label, value, note); a None value is drawn as a note only (e.g. "misses the SLO")."""
    values = [v for _, v, _ in bars if v is not None]
    if not bars:
        return _empty(title)
    yt = nice_ticks(0.0, (max(values) if values else 1.0) * 1.1)
    y0, y1 = yt[0], yt[-1]
    n = len(bars)
    slot = (_W - _LEFT - _RIGHT) / n

    def sx(i: float) -> float:
        return _LEFT + slot * (i + 0.5)

    def sy(y: float) -> float:
        return _H - _BOTTOM - (y - y0) / ((y1 - y0) or 1) * (_H - _TOP - _BOTTOM)

    parts = [_frame(title, "", y_label, [], yt, sx, sy)]
    width = min(60.0, slot * 0.6)
    for i, (label, value, note) in enumerate(bars):
        cx = sx(i)
        parts.append(f'<text x="{cx:.1f}" y="{_H - _BOTTOM + 16}" text-anchor="middle">{escape(label)}</text>')
        if value is None:
            parts.append(
                f'<text x="{cx:.1f}" y="{_H - _BOTTOM - 8}" text-anchor="middle" fill="#d62728">{escape(note)}</text>'
            )
            continue
        top = sy(value)
        parts.append(
            f'<rect x="{cx - width / 2:.1f}" y="{top:.1f}" width="{width:.1f}" height="{_H - _BOTTOM - top:.1f}" '
            f'fill="{PALETTE[i % len(PALETTE)]}"><title>{escape(label)}: {value:.6g}</title></rect>'
            f'<text x="{cx:.1f}" y="{top - 4:.1f}" text-anchor="middle">{escape(note)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _empty(title: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} 60" width="{_W}" height="60" role="img" '
        f'aria-label="{escape(title)}" font-family="sans-serif" font-size="12"><text x="8" y="24">{escape(title)}: '
        "nothing measured</text></svg>"
    )
