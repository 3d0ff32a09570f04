"""A pipeline execution's DAG as an SVG: one box per step, in columns by depth, arrows from the steps each waits
for, each box coloured and labelled with its step's status (the word too: colour is never the only cue) and
linked to the job the step started.

The edges come from the definition itself (DescribePipelineDefinitionForExecution), read as SageMaker reads it: a
step waits for its ``DependsOn``, for every step a ``{"Get": "Steps.X..."}`` in it names (``Std:JsonGet``'s property
files included), and a condition's ``IfSteps``/``ElseSteps`` for that condition. servekit's own format writes the
same references, so both formats draw. The console knows no pipeline code: this is a reading of JSON, not the
engine's DAG."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from servekit.console.links import package_href, processing_href, training_href, tuning_href
from servekit.console.render import esc

BOX_W, BOX_H, GAP_X, GAP_Y, PAD = 170, 46, 50, 18, 10
_BRANCHES = ("IfSteps", "ElseSteps")
# step status -> the badge colour class the console's stylesheet already has
_KIND = {
    "Succeeded": "good",
    "Failed": "bad",
    "Executing": "busy",
    "Starting": "busy",
    "Stopping": "busy",
    "Stopped": "warn",
}
_FILL = {"good": "#e3f5e6", "bad": "#fde8e8", "busy": "#e4eefb", "warn": "#fff3d6", "neutral": "#f4f4f4"}
_STROKE = {"good": "#0d5c1e", "bad": "#8a1010", "busy": "#0b4a8a", "warn": "#6b4500", "neutral": "#777"}


def _refs(value: Any) -> Iterator[str]:
    """The steps a JSON value's ``Get`` expressions name."""
    if isinstance(value, Mapping):
        got = value.get("Get")
        if len(value) == 1 and isinstance(got, str) and got.startswith("Steps."):
            yield got.split(".", 2)[1].split("[", 1)[0]
            return
        for v in value.values():
            yield from _refs(v)
    elif isinstance(value, list):
        for v in value:
            yield from _refs(v)


def graph(definition: Mapping[str, Any]) -> tuple[list[str], dict[str, set[str]]]:
    """Every step (branches included, in definition order) and the steps each waits for."""
    order: list[str] = []
    upstream: dict[str, set[str]] = {}

    def walk(steps: Any, gate: str | None) -> None:
        for s in steps if isinstance(steps, list) else []:
            if not isinstance(s, Mapping) or not isinstance(s.get("Name"), str):
                continue
            name = s["Name"]
            args = s.get("Arguments") if isinstance(s.get("Arguments"), Mapping) else {}
            own = {k: v for k, v in (args or {}).items() if k not in _BRANCHES}
            ups = set(_refs(own)) | {str(d) for d in s.get("DependsOn") or [] if isinstance(d, str)}
            if gate is not None:
                ups.add(gate)
            order.append(name)
            upstream[name] = ups
            for branch in _BRANCHES:
                walk((args or {}).get(branch), name)

    walk(definition.get("Steps"), None)
    known = set(order)
    return order, {k: {u for u in v if u in known and u != k} for k, v in upstream.items()}


def _depths(order: Sequence[str], upstream: Mapping[str, set[str]]) -> dict[str, int]:
    depth: dict[str, int] = {}

    def of(name: str, seen: frozenset[str]) -> int:
        if name in depth:
            return depth[name]
        if name in seen:  # a cycle (refused at CreatePipeline; drawn flat rather than looping)
            return 0
        d = 1 + max((of(u, seen | {name}) for u in upstream.get(name, ())), default=-1)
        depth[name] = d
        return d

    for n in order:
        of(n, frozenset())
    return depth


def job_link(step: Mapping[str, Any]) -> str:
    """The console page of the job (or package) a step started, from its Metadata; '' when it has none."""
    meta = step.get("Metadata") or {}
    pages = (
        ("ProcessingJob", processing_href),
        ("TrainingJob", training_href),
        ("TuningJob", tuning_href),
        ("RegisterModel", package_href),
    )
    for key, href in pages:
        arn = str((meta.get(key) or {}).get("Arn") or "")
        if arn:
            return href(arn if key == "RegisterModel" else arn.rsplit("/", 1)[-1])
    return ""


def dag_svg(definition: Mapping[str, Any], steps: Sequence[Mapping[str, Any]], finished: bool) -> str:
    """The execution's DAG; steps of a finished execution that never started read "Not run"."""
    order, upstream = graph(definition)
    if not order:
        return ""
    by_name = {str(s.get("StepName")): s for s in steps}
    depth = _depths(order, upstream)
    columns: dict[int, list[str]] = {}
    for n in order:
        columns.setdefault(depth[n], []).append(n)
    place: dict[str, tuple[int, int]] = {}
    for d, names in columns.items():
        for row, n in enumerate(names):
            place[n] = (PAD + d * (BOX_W + GAP_X), PAD + row * (BOX_H + GAP_Y))
    width = PAD * 2 + (max(columns) + 1) * (BOX_W + GAP_X) - GAP_X
    height = PAD * 2 + max(len(v) for v in columns.values()) * (BOX_H + GAP_Y) - GAP_Y
    arrows = []
    for n in order:
        x2, y2 = place[n]
        for u in sorted(upstream[n]):
            x1, y1 = place[u]
            arrows.append(
                f'<line x1="{x1 + BOX_W}" y1="{y1 + BOX_H // 2}" x2="{x2}" y2="{y2 + BOX_H // 2}" '
                'stroke="#555" marker-end="url(#arrow)"/>'
            )
    boxes = []
    for n in order:
        x, y = place[n]
        step = by_name.get(n, {})
        status = str(step.get("StepStatus") or ("Not run" if finished else "Not started"))
        kind = _KIND.get(status, "neutral")
        label = n if len(n) <= 22 else n[:21] + "…"
        box = (
            f'<g class="dag-step" data-step="{esc(n)}" data-status="{esc(status)}">'
            f"<title>{esc(n)}: {esc(status)}</title>"
            f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="6" fill="{_FILL[kind]}" '
            f'stroke="{_STROKE[kind]}"/>'
            f'<text x="{x + 8}" y="{y + 18}" font-size="13" font-weight="600">{esc(label)}</text>'
            f'<text x="{x + 8}" y="{y + 36}" font-size="12" fill="{_STROKE[kind]}">{esc(status)}</text></g>'
        )
        href = job_link(step)
        boxes.append(f'<a href="{esc(href)}">{box}</a>' if href else box)
    return (
        f'<figure class="dag"><figcaption>Steps and what each waits for</figcaption>'
        f'<svg role="img" aria-label="pipeline DAG" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">'
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/></marker></defs>'
        + "".join(arrows)
        + "".join(boxes)
        + "</svg></figure>"
    )
