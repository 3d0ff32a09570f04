"""SageMaker Model Monitor's analyzer image (``…/sagemaker-model-monitor-analyzer``) as servekit runs it.

A processing job of that image (what ``DefaultModelMonitor.suggest_baseline`` starts) runs this module in the job's
sandbox (``python3 -m servekit.services.monitoring.baseline.analyzer``: the command servekit's image table maps the
image's repository to). It reads the job's configuration from its environment, as the SDK sets it, builds servekit's
baseline of the dataset and writes SageMaker's ``statistics.json`` and ``constraints.json`` at ``output_path``, with
servekit's own summaries beside them (``baseline.json``, ``thresholds.json``, ``values/``), so the output folder is
also a baseline a monitoring schedule judges against.

Environment (the SDK's names):

- ``dataset_format`` (required): JSON, ``{"csv": {"header": true, "output_columns_position": "START"}}``,
  ``{"json": {"lines": true}}``, ``{"parquet": {}}`` or ``{"sagemakerCaptureJson": {}}`` (the API's
  ``{"Csv": {"Header": true}}`` / ``{"Json": {"Line": true}}`` spellings too).
- ``dataset_source``: the dataset's folder (default ``/opt/ml/processing/input/baseline_dataset_input``).
- ``output_path``: where the files go (default ``/opt/ml/processing/output``).
- ``categorical_drift_method``: ``LInfinity`` or ``ChiSquared``, written into ``constraints.json``.
- ``publish_cloudwatch_metrics``: ``Enabled`` or ``Disabled``; a baselining job publishes no metrics either way.
- ``record_preprocessor_script``, ``post_analytics_processor_script`` and ``analysis_type`` other than data quality
  fail the job with what to do instead.

A failure writes its reason to ``/opt/ml/output/message`` (the job's ``FailureReason``) and exits 1: ``ClientError:``
for a configuration or dataset the analyzer cannot use, ``AlgorithmError:`` for anything else.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

DEFAULT_SOURCE = "/opt/ml/processing/input/baseline_dataset_input"
DEFAULT_OUTPUT = "/opt/ml/processing/output"
MESSAGE = Path("/opt/ml/output/message")
_FORMATS = {"csv": "csv", "json": "json", "parquet": "parquet", "sagemakercapturejson": "capture"}
_UNSUPPORTED_SCRIPTS = ("record_preprocessor_script", "post_analytics_processor_script")
CATEGORICAL_DRIFT_METHODS = ("LInfinity", "ChiSquared")


class AnalyzerError(Exception):
    """A configuration or dataset the analyzer cannot use; the message says why (the job's ``ClientError``)."""


@dataclass(frozen=True, slots=True)
class Job:
    """A baselining job's configuration, checked."""

    kind: str  # csv, json, parquet or capture
    header: bool
    lines: bool
    source: Path
    output: Path
    categorical_drift_method: str | None = None


def _flag(options: Mapping[str, Any], names: Sequence[str], default: bool, where: str) -> bool:
    for name in names:
        if name in options:
            value = options[name]
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in ("true", "false"):
                return value.lower() == "true"
            raise AnalyzerError(f"dataset_format {where}.{name} must be true or false, not {value!r}")
    return default


def parse_format(text: str | None) -> tuple[str, bool, bool]:
    """``dataset_format`` as (kind, csv header, json lines)."""
    if not text:
        raise AnalyzerError(
            "Environment dataset_format is required: the SDK's DatasetFormat.csv(header=True), DatasetFormat.json() "
            'or e.g. {"csv": {"header": true}}'
        )
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise AnalyzerError(f"Environment dataset_format is not JSON: {text!r}") from None
    if not isinstance(doc, dict) or len(doc) != 1:
        raise AnalyzerError(
            f"Environment dataset_format names one format (csv, json, parquet or sagemakerCaptureJson), not {text!r}"
        )
    ((key, options),) = doc.items()
    kind = _FORMATS.get(str(key).lower())
    if kind is None:
        raise AnalyzerError(
            f"dataset_format {key!r} is not one servekit's analyzer reads: csv, json, parquet or sagemakerCaptureJson"
        )
    options = options if isinstance(options, dict) else {}
    lowered = {str(k).lower(): v for k, v in options.items()}
    header = _flag(lowered, ("header",), True, key) if kind == "csv" else True
    lines = _flag(lowered, ("lines", "line"), True, key) if kind == "json" else True
    return kind, header, lines


def job_from_env(env: Mapping[str, str]) -> Job:
    """The job's configuration from its environment; :class:`AnalyzerError` names what is wrong."""
    analysis = env.get("analysis_type", "").strip().upper()
    if analysis and analysis not in ("DATA_QUALITY", "DATAQUALITY"):
        raise AnalyzerError(
            f"analysis_type {env['analysis_type']} is not supported by servekit's analyzer, which suggests "
            "data-quality baselines (DefaultModelMonitor); make a model-quality baseline with servekit monitor "
            "quality-baseline"
        )
    for key in _UNSUPPORTED_SCRIPTS:
        if env.get(key):
            raise AnalyzerError(
                f"servekit's analyzer runs no scripts of yours: {key} is not supported (transform the dataset before "
                "suggest_baseline instead)"
            )
    publish = env.get("publish_cloudwatch_metrics", "Disabled")
    if publish not in ("Enabled", "Disabled"):
        raise AnalyzerError(f"Environment publish_cloudwatch_metrics must be Enabled or Disabled, not {publish!r}")
    method = env.get("categorical_drift_method") or None
    if method is not None and method not in CATEGORICAL_DRIFT_METHODS:
        raise AnalyzerError(
            f"Environment categorical_drift_method must be {' or '.join(CATEGORICAL_DRIFT_METHODS)}, not {method!r}"
        )
    kind, header, lines = parse_format(env.get("dataset_format"))
    source = Path(env.get("dataset_source") or DEFAULT_SOURCE)
    if not source.exists():
        raise AnalyzerError(
            f"dataset_source {source} does not exist: give the baseline dataset as a ProcessingInput at that path"
        )
    return Job(kind, header, lines, source, Path(env.get("output_path") or DEFAULT_OUTPUT), method)


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def analyze(job: Job, say: Callable[[str], None] = _say) -> dict[str, Any]:
    """Build the baseline of the job's dataset and write its files; returns ``statistics.json``'s content."""
    from servekit.services.monitoring.baseline import store
    from servekit.services.monitoring.baseline.build import build_from
    from servekit.services.monitoring.baseline.datasets import tables
    from servekit.services.monitoring.baseline.statistics_constraints import constraints, statistics
    from servekit.services.monitoring.config import BaselineConfig
    from servekit.services.monitoring.stream.sources import SourceError, SourceStats

    cfg = BaselineConfig()
    described = f"{job.kind}{' with a header' if job.kind == 'csv' and job.header else ''}"
    say(f"servekit analyzer: baseline of {job.source} ({described})")
    stats = SourceStats()
    try:
        baseline = build_from(
            lambda counted: tables(
                job.source, job.kind, header=job.header, lines=job.lines, batch_rows=cfg.batch_rows, stats=counted
            ),
            cfg,
            stats,
            f"dataset_source {job.source}",
        )
    except SourceError as exc:
        raise AnalyzerError(str(exc)) from None
    say(f"servekit analyzer: {baseline.rows} rows from {stats.files} files, {len(baseline.profiles)} features")
    for name, p in baseline.profiles.items():
        say(f"  {name}: {p.feature.inferred_type.value}")
    job.output.mkdir(parents=True, exist_ok=True)
    store.write_files(baseline, job.output, constraints(baseline, job.categorical_drift_method))
    say(f"servekit analyzer: wrote statistics.json and constraints.json to {job.output}")
    return statistics(baseline)


def _fail(text: str, message: Path) -> int:
    sys.stderr.write(text + "\n")
    try:
        if message.parent.is_dir():
            message.write_text(text[:1024])
    except OSError:
        pass
    return 1


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None, message: Path = MESSAGE) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    env = os.environ if environ is None else environ
    if args:
        _say(f"servekit analyzer: ContainerArguments {args} are not used")
    try:
        job = job_from_env(env)
        analyze(job)
    except AnalyzerError as exc:
        return _fail(f"ClientError: {exc}", message)
    except ImportError as exc:
        return _fail(
            "ClientError: servekit's Model Monitor analyzer needs the monitor extra "
            f"(pip install 'servekit[monitor]'): {exc}",
            message,
        )
    except Exception as exc:
        traceback.print_exc()
        return _fail(f"AlgorithmError: {type(exc).__name__}: {exc}", message)
    return 0


if __name__ == "__main__":
    sys.exit(main())
