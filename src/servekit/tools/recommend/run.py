"""One recommendation end to end, for the command line and the API job alike: resolve the instance types, measure,
build the report, write ``recommendations.json`` and ``report.html`` under the output directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from servekit.errors import ConfigError
from servekit.services.hosting.instance_types import InstanceType, InstanceTypes, this_machine
from servekit.tools.recommend.html import render_html
from servekit.tools.recommend.report import build_report
from servekit.tools.recommend.runner import Progress, run_recommendation
from servekit.tools.recommend.spec import RecommendSpec

JSON_NAME = "recommendations.json"
HTML_NAME = "report.html"


def resolve_types(names: tuple[str, ...], table: InstanceTypes) -> list[InstanceType]:
    """The named types, in order; ConfigError naming the unknown ones and what is known."""
    unknown = [n for n in names if n not in table]
    if unknown:
        raise ConfigError(
            f"unknown instance type(s) {', '.join(unknown)}; known types: {', '.join(table.names())} "
            "(add your own with --instance-types-file)"
        )
    return [table[n] for n in names]


async def recommend(
    spec: RecommendSpec,
    table: InstanceTypes,
    out_dir: Path,
    progress: Progress = lambda _: None,
    job_name: str = "servekit-recommend",
) -> dict[str, Any]:
    types = resolve_types(spec.instance_types, table)
    out_dir.mkdir(parents=True, exist_ok=True)
    measurements = await run_recommendation(spec, types, out_dir, this_machine().memory_gib, progress)
    report = build_report(measurements, job_name)
    write_report(report, out_dir)
    return report


def write_report(report: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, html_path = out_dir / JSON_NAME, out_dir / HTML_NAME
    json_path.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
    html_path.write_text(render_html(report))
    return json_path, html_path
