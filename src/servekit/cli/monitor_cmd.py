"""``servekit monitor``: baselines from training data, drift runs over captured traffic, a scheduled watch."""

from __future__ import annotations

import importlib.util
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from servekit.errors import ConfigError

if TYPE_CHECKING:
    from servekit.services.monitoring.config import MonitorConfig
    from servekit.services.monitoring.runs.run import RunResult

monitor_app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="Data drift: baselines, windows, thresholds, alarms, reports."
)

Threshold = Annotated[
    list[str] | None,
    typer.Option("--threshold", help="Fixed threshold FEATURE.METRIC=VALUE, replacing the learned one (repeat)."),
]


def _fail(message: str, code: int) -> NoReturn:
    typer.echo(f"servekit: {message}", err=True)
    raise typer.Exit(code)


def _logging(level: str) -> None:
    missing = [m for m in ("pyarrow", "scipy") if importlib.util.find_spec(m) is None]
    if missing:
        _fail(f"the monitor needs {' and '.join(missing)}: pip install 'servekit[monitor]'", 2)
    logging.basicConfig(
        level=level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def _overrides(items: list[str] | None) -> tuple[tuple[str, str, float], ...]:
    from servekit.services.monitoring.drift.thresholds import parse_override

    return tuple(parse_override(t) for t in items or [])


@monitor_app.command()
def baseline(
    data: Annotated[str, typer.Option("--data", help="Training data: .csv, .parquet or .jsonl (file or folder).")],
    out: Annotated[Path, typer.Option("--out", help="Baseline folder; each call adds a version and makes it current.")],
    exclude: Annotated[
        list[str] | None, typer.Option("--exclude", help="Column that is not a feature (repeat).")
    ] = None,
    categorical: Annotated[
        list[str] | None, typer.Option("--categorical", help="Numeric-looking column to treat as categories (repeat).")
    ] = None,
    timestamp_column: Annotated[
        str | None, typer.Option("--timestamp-column", help="Time column (not a feature).")
    ] = None,
    chunks: Annotated[int, typer.Option("--chunks", help="Random baseline parts for the learned thresholds.")] = 10,
    k: Annotated[float, typer.Option("--k", help="Threshold = mean + k·std of the metric over the chunks.")] = 3.0,
    fine_bins: Annotated[int, typer.Option("--fine-bins", help="Quantile bins per numerical feature.")] = 1000,
    max_categories: Annotated[int, typer.Option("--max-categories", help="Categories kept per feature.")] = 1000,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the sampling and the chunks.")] = 0,
    threshold: Threshold = None,
    log_level: Annotated[str, typer.Option("--log-level", help="debug, info, warning, error.")] = "warning",
) -> None:
    """Profile training data: statistics.json + constraints.json (SageMaker) and servekit's summaries."""
    _logging(log_level)
    from servekit.services.monitoring.baseline import store
    from servekit.services.monitoring.baseline.build import build
    from servekit.services.monitoring.config import BaselineConfig
    from servekit.services.monitoring.stream.sources import SourceError, UnreadableFile

    try:
        cfg = BaselineConfig(
            fine_bins=fine_bins,
            chunks=chunks,
            k=k,
            max_categories=max_categories,
            seed=seed,
            categorical=frozenset(categorical or ()),
            exclude=frozenset(exclude or ()),
            timestamp_column=timestamp_column,
            overrides=_overrides(threshold),
        )
    except (ConfigError, ValueError) as exc:
        _fail(str(exc), 2)
    try:
        result = build(data, cfg)
    except UnreadableFile as exc:  # a file that is not what its name says: like a bad flag, fix the input
        _fail(str(exc), 2)
    except SourceError as exc:
        _fail(str(exc), 1)
    folder = store.save(result, out)
    typer.echo(f"baseline {folder.name} written to {folder} ({result.rows} rows, {len(result.profiles)} features)")
    for name, p in result.profiles.items():
        typer.echo(f"  {name}: {p.feature.inferred_type.value} ({p.feature.kind.value})")


def _monitor_config(
    window: str,
    step: str | None,
    since: str | None,
    until: str | None,
    timestamp_column: str | None,
    min_window_rows: int,
    consecutive: int,
    webhook: list[str] | None,
    webhook_attempts: int,
    threshold: list[str] | None,
    metrics: str | None,
    report: bool,
    alpha: float | None = None,
    window_values: int | None = None,
    lateness: str | None = None,
) -> MonitorConfig:
    from servekit.services.monitoring.config import MonitorConfig, WebhookConfig
    from servekit.services.monitoring.drift.thresholds import JUDGED_METRICS
    from servekit.services.monitoring.stream.windows import parse_duration, parse_time

    extra: dict[str, Any] = {}
    if alpha is not None:
        extra["alpha"] = alpha
    if window_values is not None:
        extra["window_values"] = window_values
    if lateness is not None:
        extra["lateness"] = 0 if lateness.strip() in ("0", "0s") else parse_duration(lateness)
    return MonitorConfig(
        **extra,
        window=parse_duration(window),
        step=parse_duration(step) if step else None,
        since=parse_time(since) if since else None,
        until=parse_time(until) if until else None,
        timestamp_column=timestamp_column,
        min_window_rows=min_window_rows,
        consecutive=consecutive,
        judged_metrics=tuple(m.strip() for m in metrics.split(",") if m.strip()) if metrics else JUDGED_METRICS,
        overrides=_overrides(threshold),
        webhooks=WebhookConfig(urls=tuple(webhook or ()), attempts=webhook_attempts),
        report=report,
    )


WindowOpt = Annotated[str, typer.Option("--window", help="Window length: 90s, 15m, 6h, 1d.")]
StepOpt = Annotated[str | None, typer.Option("--step", help="Distance between window ends (default: the window).")]
SinceOpt = Annotated[str | None, typer.Option("--since", help="Ignore rows before this time (ISO 8601).")]
UntilOpt = Annotated[str | None, typer.Option("--until", help="Ignore rows from this time on (ISO 8601).")]
TsOpt = Annotated[
    str | None, typer.Option("--timestamp-column", help="Time column of CSV/Parquet/JSONL data (capture has its own).")
]
MinRowsOpt = Annotated[int, typer.Option("--min-window-rows", help="Fewer rows: reported as insufficient.")]
ConsecutiveOpt = Annotated[int, typer.Option("--consecutive", help="Drifted windows in a row that raise an alarm.")]
WebhookOpt = Annotated[list[str] | None, typer.Option("--webhook", help="POST alarms as JSON here (repeat).")]
AttemptsOpt = Annotated[int, typer.Option("--webhook-attempts", help="Tries per alarm and webhook.")]
MetricsOpt = Annotated[
    str | None,
    typer.Option("--metrics", help="Comma-separated metrics that judge drift (default: all with thresholds)."),
]
ReportOpt = Annotated[bool, typer.Option("--report/--no-report", help="Write report.html.")]
AlphaOpt = Annotated[
    float | None,
    typer.Option("--alpha", help="Family-wise false-alarm rate per window of the Holm-corrected tests (0.005)."),
]
WindowValuesOpt = Annotated[
    int | None,
    typer.Option(
        "--window-values", help="Values kept per numerical feature and pane for exact KS (1000000; then a sample)."
    ),
]
LatenessOpt = Annotated[
    str | None,
    typer.Option(
        "--lateness",
        help="Data not in hourly capture partitions: how far (e.g. 10m) a row may lag the newest one read, so "
        "windows finish and free memory while reading (default: keep everything to the end).",
    ),
]
LogOpt = Annotated[str, typer.Option("--log-level", help="debug, info, warning, error.")]


@monitor_app.command("run")
def run_cmd(
    baseline: Annotated[Path, typer.Option("--baseline", help="Baseline folder (or one of its versions).")],
    data: Annotated[str, typer.Option("--data", help="Capture folder, or CSV/Parquet/JSONL with a time column.")],
    out: Annotated[Path, typer.Option("--out", help="Output folder.")],
    window: WindowOpt = "1h",
    step: StepOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    timestamp_column: TsOpt = None,
    min_window_rows: MinRowsOpt = 100,
    consecutive: ConsecutiveOpt = 3,
    webhook: WebhookOpt = None,
    webhook_attempts: AttemptsOpt = 5,
    threshold: Threshold = None,
    metrics: MetricsOpt = None,
    report: ReportOpt = True,
    alpha: AlphaOpt = None,
    window_values: WindowValuesOpt = None,
    lateness: LatenessOpt = None,
    fail_on_alarm: Annotated[bool, typer.Option("--fail-on-alarm", help="Exit with status 3 if any alarm.")] = False,
    publish_url: Annotated[
        str | None,
        typer.Option(
            "--publish-url",
            help="Publish DriftedFeatures, DataQualityViolations and DriftAlarms as CloudWatch metrics to this "
            "servekit up (needs --endpoint-name).",
        ),
    ] = None,
    endpoint_name: Annotated[
        str | None, typer.Option("--endpoint-name", help="EndpointName dimension of the published metrics.")
    ] = None,
    variant_name: Annotated[
        str | None, typer.Option("--variant-name", help="VariantName dimension of the published metrics.")
    ] = None,
    publish_namespace: Annotated[
        str, typer.Option("--publish-namespace", help="Namespace of the published metrics.")
    ] = "servekit",
    home: Annotated[
        Path | None,
        typer.Option(
            "--home", help="servekit home with the keys to sign with (default $SERVEKIT_HOME or ./.servekit)."
        ),
    ] = None,
    log_level: LogOpt = "warning",
) -> None:
    """Judge each window of the data against the baseline; write metrics.json, violations and report.html."""
    if publish_url is not None and not endpoint_name:
        _fail("--publish-url needs --endpoint-name (the metrics' EndpointName dimension)", 2)
    if publish_url is None and (endpoint_name or variant_name):
        _fail("--endpoint-name and --variant-name name the published metrics: give --publish-url too", 2)
    _logging(log_level)
    from servekit.services.monitoring.alerts.webhooks import AlertLog, Notifier
    from servekit.services.monitoring.baseline.store import BaselineError
    from servekit.services.monitoring.runs.job import JobSpec, run_job
    from servekit.services.monitoring.stream.sources import SourceError, UnreadableFile

    try:
        cfg = _monitor_config(
            window,
            step,
            since,
            until,
            timestamp_column,
            min_window_rows,
            consecutive,
            webhook,
            webhook_attempts,
            threshold,
            metrics,
            report,
            alpha,
            window_values,
            lateness,
        )
    except (ConfigError, ValueError) as exc:
        _fail(str(exc), 2)
    notifier = Notifier(cfg.webhooks, AlertLog(out / "alerts.jsonl"))
    try:
        result = run_job(JobSpec(baseline, data, out, cfg), notifier)
    except UnreadableFile as exc:
        _fail(str(exc), 2)
    except (BaselineError, SourceError) as exc:
        _fail(str(exc), 1)
    finally:
        delivery = notifier.close(timeout=cfg.webhooks.timeout_seconds * cfg.webhooks.attempts + 5)
    for warning in result.warnings:
        typer.echo(f"servekit: warning: {warning}", err=True)
    ok = sum(1 for r in result.windows if r.status == "ok")
    drifted = sorted({n for r in result.windows for n, f in r.features.items() if f.drifted})
    typer.echo(f"{len(result.windows)} windows ({ok} judged), {len(result.alarms)} alarms; outputs in {out}")
    if drifted:
        typer.echo(f"drifted features: {', '.join(drifted)}")
    quality = sorted({n for r in result.windows for n, f in r.features.items() if f.quality})
    if quality:  # missing-value jumps: data quality, not drift
        typer.echo(f"data quality (missing share): {', '.join(quality)}")
    for a in result.alarms:
        typer.echo(f"ALARM {a.feature}: {a.describe()} at window {a.window_index}")
    if cfg.webhooks.urls:
        typer.echo(f"webhooks: {delivery.delivered} delivered, {delivery.failed} failed, {delivery.dropped} dropped")
    if publish_url is not None and endpoint_name:
        _publish(result, publish_url, publish_namespace, endpoint_name, variant_name, home)
    if fail_on_alarm and result.alarms:
        raise typer.Exit(3)


def _publish(
    result: RunResult, url: str, namespace: str, endpoint: str, variant: str | None, home: Path | None
) -> None:
    """PutMetricData of the run's verdict (servekit.cli.monitor_publish); an API error exits 1 in one line."""
    from datetime import UTC, datetime

    from servekit.cli.api_client import api_errors, client
    from servekit.cli.monitor_publish import drift_metric_data

    data = drift_metric_data(result, endpoint, variant, datetime.now(UTC))
    if not data:
        typer.echo("servekit: warning: no judged window: no drift metrics published", err=True)
        return
    cloudwatch = client("cloudwatch", url, home)
    with api_errors(url):
        cloudwatch.put_metric_data(Namespace=namespace, MetricData=data)
    summary = ", ".join(f"{d['MetricName']}={d['Value']:g}" for d in data)
    typer.echo(f"published to {url}: {namespace} {summary}")


@monitor_app.command()
def watch(
    baseline: Annotated[Path, typer.Option("--baseline", help="Baseline folder (re-read every run).")],
    data: Annotated[str, typer.Option("--data", help="Capture folder, or CSV/Parquet/JSONL with a time column.")],
    out: Annotated[Path, typer.Option("--out", help="Output folder: one subfolder per run plus the state.")],
    every: Annotated[str, typer.Option("--every", help="Run on multiples of this (e.g. 1h).")] = "1h",
    delay: Annotated[str, typer.Option("--delay", help="Wait this long after a window ends (late capture).")] = "0s",
    max_runs: Annotated[int | None, typer.Option("--max-runs", help="Stop after this many runs.")] = None,
    window: WindowOpt = "1h",
    step: StepOpt = None,
    timestamp_column: TsOpt = None,
    min_window_rows: MinRowsOpt = 100,
    consecutive: ConsecutiveOpt = 3,
    webhook: WebhookOpt = None,
    webhook_attempts: AttemptsOpt = 5,
    threshold: Threshold = None,
    metrics: MetricsOpt = None,
    report: ReportOpt = True,
    alpha: AlphaOpt = None,
    window_values: WindowValuesOpt = None,
    log_level: LogOpt = "info",
    metrics_port: Annotated[
        int | None,
        typer.Option("--metrics-port", help="Serve the latest verdict as Prometheus text on this port (/metrics)."),
    ] = None,
    metrics_host: Annotated[str, typer.Option("--metrics-host", help="Address of --metrics-port.")] = "127.0.0.1",
) -> None:
    """Run the monitor on a schedule as a long-lived process, alarms carried across runs."""
    _logging(log_level)
    from servekit.services.monitoring.alerts.webhooks import AlertLog, Notifier
    from servekit.services.monitoring.runs.job import JobSpec
    from servekit.services.monitoring.runs.watch import SystemClock
    from servekit.services.monitoring.runs.watch import watch as watch_loop
    from servekit.services.monitoring.stream.windows import parse_duration

    try:
        cfg = _monitor_config(
            window,
            step,
            None,
            None,
            timestamp_column,
            min_window_rows,
            consecutive,
            webhook,
            webhook_attempts,
            threshold,
            metrics,
            report,
            alpha,
            window_values,
        )
        every_s = parse_duration(every)
        delay_s = 0 if delay.strip() in ("0", "0s") else parse_duration(delay)
    except (ConfigError, ValueError) as exc:
        _fail(str(exc), 2)
    notifier = Notifier(cfg.webhooks, AlertLog(out / "alerts.jsonl"))
    exporter = None
    if metrics_port is not None:
        from servekit.services.monitoring.alerts.exporter import WatchExporter

        try:
            exporter = WatchExporter(out, metrics_host, metrics_port)
        except OSError as exc:
            _fail(f"--metrics-port {metrics_port}: {exc.strerror or exc}", 2)
        exporter.start()
        typer.echo(f"monitor watch: Prometheus metrics on http://{metrics_host}:{exporter.port}/metrics")
    on_run = exporter.record_run if exporter is not None else None
    try:
        watch_loop(JobSpec(baseline, data, out, cfg), notifier, every_s, SystemClock(), delay_s, max_runs, on_run)
    except KeyboardInterrupt:
        pass
    finally:
        notifier.close(timeout=cfg.webhooks.timeout_seconds * cfg.webhooks.attempts + 5)
        if exporter is not None:
            exporter.close()


# ---- model quality ---------------------------------------------------------------------------------------------
ProblemOpt = Annotated[
    str | None,
    typer.Option("--problem-type", help="BinaryClassification, MulticlassClassification or Regression."),
]
InferenceOpt = Annotated[
    str | None,
    typer.Option("--inference-attribute", help="Output (or answer JSON key, CSV column number) with the prediction."),
]
ProbabilityOpt = Annotated[
    str | None,
    typer.Option("--probability-attribute", help="Output with class probabilities ([N, K], or [N]: positive class)."),
]
ThresholdOpt = Annotated[
    float,
    typer.Option("--probability-threshold", help="Binary, probabilities only: predicted positive at or above this."),
]
PositiveOpt = Annotated[str | None, typer.Option("--positive-label", help="Binary: the positive class (default 1).")]
ClassesOpt = Annotated[
    str | None, typer.Option("--class-labels", help="Comma-separated classes in the order of probability columns.")
]


@monitor_app.command()
def labels(
    data: Annotated[str, typer.Option("--data", help="Label file (.csv, .jsonl, .parquet) or a folder of them.")],
    store: Annotated[Path, typer.Option("--store", help="Label store folder (created if missing).")],
    id_column: Annotated[
        str | None,
        typer.Option("--id-column", help="Column with the inference id (or eventId) the label belongs to."),
    ] = None,
    label_column: Annotated[str, typer.Option("--label-column", help="Column with the label.")] = "label",
    every: Annotated[
        str | None, typer.Option("--every", help="Keep ingesting new files from --data at this interval (e.g. 1m).")
    ] = None,
    max_runs: Annotated[int | None, typer.Option("--max-runs", help="With --every: stop after this many.")] = None,
    log_level: LogOpt = "warning",
) -> None:
    """Ingest ground truth into a label store: each file once; join key = the request's inference id."""
    _logging(log_level)
    import time

    from servekit.services.monitoring.quality.labels import LabelError, ingest
    from servekit.services.monitoring.stream.sources import SourceError, UnreadableFile
    from servekit.services.monitoring.stream.windows import parse_duration

    try:
        interval = parse_duration(every) if every else None
    except ValueError as exc:
        _fail(str(exc), 2)
    runs = 0
    while True:
        try:
            report = ingest(data, store, id_column, label_column)
        except (LabelError, UnreadableFile) as exc:
            _fail(str(exc), 2)
        except SourceError as exc:
            if interval is None:
                _fail(str(exc), 1)
            report = None  # a watched folder may still be empty
        if report is not None:
            typer.echo(
                f"ingested {report.files} file(s), {report.rows} label(s) into {store}; "
                f"{report.skipped} already ingested"
            )
        runs += 1
        if interval is None or (max_runs is not None and runs >= max_runs):
            return
        time.sleep(interval)


@monitor_app.command("quality-baseline")
def quality_baseline(
    data: Annotated[str, typer.Option("--data", help="Labelled predictions: .csv, .parquet or .jsonl.")],
    output: Annotated[Path, typer.Option("--output", help="Folder for statistics.json and constraints.json.")],
    problem_type: Annotated[
        str, typer.Option("--problem-type", help="BinaryClassification, MulticlassClassification or Regression.")
    ],
    ground_truth_attribute: Annotated[
        str, typer.Option("--ground-truth-attribute", help="Column with the true label or value.")
    ] = "label",
    inference_attribute: InferenceOpt = None,
    probability_attribute: ProbabilityOpt = None,
    probability_threshold: ThresholdOpt = 0.5,
    positive_label: PositiveOpt = None,
    class_labels: ClassesOpt = None,
    chunks: Annotated[int, typer.Option("--chunks", help="Random parts whose spread sets the thresholds.")] = 10,
    k: Annotated[float, typer.Option("--k", help="Threshold = value -/+ k·std over the chunks.")] = 3.0,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the chunks.")] = 0,
    log_level: LogOpt = "warning",
) -> None:
    """Model-quality statistics and suggested constraints (SageMaker's model-quality JSON shapes)."""
    _logging(log_level)
    from servekit.services.monitoring.baseline.store import dump, write_atomic
    from servekit.services.monitoring.quality.baseline import build
    from servekit.services.monitoring.quality.run import QualityConfig, QualityError
    from servekit.services.monitoring.stream.sources import SourceError, UnreadableFile

    try:
        cfg = QualityConfig(
            problem_type=problem_type,
            inference_attribute=inference_attribute,
            probability_attribute=probability_attribute,
            probability_threshold=probability_threshold,
            positive_label=positive_label,
            class_labels=_classes(class_labels),
        )
        statistics, constraints = build(data, problem_type, ground_truth_attribute, cfg, chunks=chunks, k=k, seed=seed)
    except (ConfigError, QualityError, UnreadableFile) as exc:
        _fail(str(exc), 2)
    except SourceError as exc:
        _fail(str(exc), 1)
    write_atomic(output / "statistics.json", dump(statistics))
    write_atomic(output / "constraints.json", dump(constraints))
    section = next(v for key, v in constraints.items() if key.endswith("_constraints"))
    typer.echo(f"quality baseline written to {output} ({statistics['dataset']['item_count']} rows)")
    for name, c in section.items():
        typer.echo(f"  {name}: {c['comparison_operator']} {c['threshold']:.4g}")


def _classes(text: str | None) -> tuple[str, ...]:
    return tuple(c.strip() for c in text.split(",") if c.strip()) if text else ()


@monitor_app.command("quality", no_args_is_help=True)
def quality_run(
    action: Annotated[str, typer.Argument(help="run (servekit monitor quality run ...).", metavar="run")],
    capture: Annotated[str, typer.Option("--capture", help="Capture folder or URI (JSON Lines or Parquet layout).")],
    labels_store: Annotated[Path, typer.Option("--labels", help="Label store (servekit monitor labels).")],
    baseline: Annotated[
        Path, typer.Option("--baseline", help="constraints.json (SageMaker model-quality shape) or its folder.")
    ],
    output: Annotated[Path, typer.Option("--output", help="Output folder.")],
    problem_type: ProblemOpt = None,
    window: WindowOpt = "1h",
    step: StepOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    min_window_rows: Annotated[
        int, typer.Option("--min-window-rows", help="Fewer labelled rows: reported, not judged.")
    ] = 100,
    consecutive: ConsecutiveOpt = 3,
    inference_attribute: InferenceOpt = None,
    probability_attribute: ProbabilityOpt = None,
    probability_threshold: ThresholdOpt = 0.5,
    positive_label: PositiveOpt = None,
    class_labels: ClassesOpt = None,
    lateness: LatenessOpt = None,
    report: ReportOpt = True,
    fail_on_alarm: Annotated[bool, typer.Option("--fail-on-alarm", help="Exit with status 3 if any alarm.")] = False,
    log_level: LogOpt = "warning",
) -> None:
    """Model quality per window (servekit monitor quality run): captured predictions joined to ground truth, judged
    against the constraints; writes quality_metrics.json, constraint_violations.json and report.html."""
    if action != "run":  # one verb today; the word keeps the command line the schedules use stable
        _fail(f"unknown action {action!r}: use servekit monitor quality run", 2)
    _logging(log_level)
    import orjson

    from servekit.services.monitoring.quality import outputs as quality_outputs
    from servekit.services.monitoring.quality.labels import LabelError, load
    from servekit.services.monitoring.quality.run import Constraints, QualityConfig, QualityError, run_quality
    from servekit.services.monitoring.stream.sources import SourceError, UnreadableFile
    from servekit.services.monitoring.stream.windows import parse_duration, parse_time

    try:
        cfg = QualityConfig(
            problem_type=problem_type,
            window=parse_duration(window),
            step=parse_duration(step) if step else None,
            since=parse_time(since) if since else None,
            until=parse_time(until) if until else None,
            min_window_rows=min_window_rows,
            consecutive=consecutive,
            inference_attribute=inference_attribute,
            probability_attribute=probability_attribute,
            probability_threshold=probability_threshold,
            positive_label=positive_label,
            class_labels=_classes(class_labels),
            lateness=None if lateness is None else (0 if lateness.strip() in ("0", "0s") else parse_duration(lateness)),
            report=report,
        )
    except (ConfigError, ValueError) as exc:
        _fail(str(exc), 2)
    path = baseline / "constraints.json" if baseline.is_dir() else baseline
    try:
        constraints = Constraints.from_json(orjson.loads(path.read_bytes()), problem_type)
    except (OSError, orjson.JSONDecodeError) as exc:
        _fail(f"cannot read the constraints {path}: {exc}", 1)
    except QualityError as exc:
        _fail(f"{path}: {exc}", 2)
    try:
        result = run_quality(capture, load(labels_store), constraints, cfg)
    except (QualityError, UnreadableFile) as exc:
        _fail(str(exc), 2)
    except (LabelError, SourceError) as exc:
        _fail(str(exc), 1)
    info = {
        "capture": capture,
        "labels": str(labels_store),
        "baseline": str(path),
        "window_seconds": cfg.window,
        "step_seconds": cfg.step_seconds,
        "min_window_rows": cfg.min_window_rows,
        "consecutive": cfg.consecutive,
    }
    quality_outputs.write(output, result, info, cfg.report)
    for warning in result.warnings:
        typer.echo(f"servekit: warning: {warning}", err=True)
    ok = sum(1 for w in result.windows if w.status == "ok")
    typer.echo(
        f"{len(result.windows)} windows ({ok} judged), {sum(w.labelled for w in result.windows)} labelled "
        f"predictions, {len(result.alarms)} alarms; outputs in {output}"
    )
    latest = quality_outputs.latest_judged(result)
    if latest is not None:
        shown = ", ".join(f"{m}={v:.4g}" for m, (v, _) in latest.judged.items())
        typer.echo(f"latest judged window {latest.window.index}: {shown}")
        for v in latest.violations:
            typer.echo(f"VIOLATION {v['description']}")
    for a in result.alarms:
        typer.echo(f"ALARM {quality_outputs.describe(result, a)} at window {a.window_index}")
    if fail_on_alarm and result.alarms:
        raise typer.Exit(3)
