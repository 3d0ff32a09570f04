"""Frozen, validated settings of the monitor. The CLI builds them; nothing below reads flags or the environment."""

from __future__ import annotations

from dataclasses import dataclass

from servekit.errors import ConfigError
from servekit.services.monitoring.drift.thresholds import JUDGED_METRICS
from servekit.services.monitoring.drift.values import EXACT_VALUES
from servekit.services.monitoring.drift.verdict import ALPHA

Override = tuple[str, str, float]  # (feature, metric, fixed threshold)


@dataclass(frozen=True, slots=True)
class BaselineConfig:
    fine_bins: int = 1000  # quantile edges per numerical feature: KS resolution ~1/fine_bins
    psi_bins: int = 10  # PSI bins: groups of fine bins of ~equal baseline share
    chunks: int = 10  # random baseline parts for the learned thresholds
    k: float = 3.0  # threshold = mean + k·std over the chunks
    max_categories: int = 1000  # categories kept per categorical feature; the rest are lumped as "other"
    # Numerical values kept per feature: all of them up to this many (exact statistics; 8 MB per feature on
    # disk and in memory), else a uniform seeded sample of this many. They also place the quantile edges.
    sample_rows: int = EXACT_VALUES
    seed: int = 0
    batch_rows: int = 65536
    categorical: frozenset[str] = frozenset()  # numerical-looking columns to treat as categories
    exclude: frozenset[str] = frozenset()  # columns that are not features (labels, ids)
    timestamp_column: str | None = None  # never a feature
    overrides: tuple[Override, ...] = ()

    def __post_init__(self) -> None:
        if self.fine_bins < 2:
            raise ConfigError("fine_bins must be >= 2")
        if self.psi_bins < 2:
            raise ConfigError("psi_bins must be >= 2")
        if self.chunks < 2:
            raise ConfigError("chunks must be >= 2")
        if self.k < 0:
            raise ConfigError("k must be >= 0")
        if self.max_categories < 1:
            raise ConfigError("max_categories must be >= 1")
        if self.sample_rows < 100:
            raise ConfigError("sample_rows must be >= 100")
        if self.batch_rows < 1:
            raise ConfigError("batch_rows must be >= 1")
        _check_overrides(self.overrides)


@dataclass(frozen=True, slots=True)
class WebhookConfig:
    urls: tuple[str, ...] = ()
    attempts: int = 5  # deliveries tried per alert and URL
    timeout_seconds: float = 5.0
    backoff_seconds: float = 1.0  # waits 1, 2, 4, ... between attempts
    queue_size: int = 1000  # alerts waiting beyond this are dropped (and logged), never blocking the run

    def __post_init__(self) -> None:
        for url in self.urls:
            if not url.startswith(("http://", "https://")):
                raise ConfigError(f"webhook {url!r} must be an http:// or https:// URL")
        if self.attempts < 1:
            raise ConfigError("webhook attempts must be >= 1")
        if self.timeout_seconds <= 0 or self.backoff_seconds < 0:
            raise ConfigError("webhook timeout must be > 0 and backoff >= 0")
        if self.queue_size < 1:
            raise ConfigError("webhook queue_size must be >= 1")


@dataclass(frozen=True, slots=True)
class MonitorConfig:
    window: int = 3600  # seconds
    step: int | None = None  # seconds; None = window (tumbling windows)
    min_window_rows: int = 100
    consecutive: int = 3
    since: float | None = None  # epoch seconds
    until: float | None = None
    timestamp_column: str | None = None
    judged_metrics: tuple[str, ...] = JUDGED_METRICS
    overrides: tuple[Override, ...] = ()
    batch_rows: int = 65536
    webhooks: WebhookConfig = WebhookConfig()
    report: bool = True
    alpha: float = ALPHA  # family-wise false-alarm rate per window (Holm across features)
    window_values: int = EXACT_VALUES  # values kept per feature and pane for exact statistics (then a sample)
    # Data in no time order (not hourly capture partitions): a row may arrive at most this many seconds behind the
    # newest row read, so windows finish (and their panes are released) while reading. None: keep every pane.
    lateness: int | None = None

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ConfigError("window must be >= 1s")
        if self.step is not None and self.step < 1:
            raise ConfigError("step must be >= 1s")
        if self.min_window_rows < 1:
            raise ConfigError("min_window_rows must be >= 1")
        if self.consecutive < 1:
            raise ConfigError("consecutive must be >= 1")
        if self.since is not None and self.until is not None and self.since >= self.until:
            raise ConfigError("since must be before until")
        unknown = [m for m in self.judged_metrics if m not in JUDGED_METRICS]
        if unknown or not self.judged_metrics:
            raise ConfigError(f"judged metrics must be some of {', '.join(JUDGED_METRICS)}; got {unknown or 'none'}")
        if self.batch_rows < 1:
            raise ConfigError("batch_rows must be >= 1")
        if not 0 < self.alpha < 1:
            raise ConfigError("alpha must be in (0, 1)")
        if self.window_values < 100:
            raise ConfigError("window_values must be >= 100")
        if self.lateness is not None and self.lateness < 0:
            raise ConfigError("lateness must be >= 0s")
        _check_overrides(self.overrides)

    @property
    def step_seconds(self) -> int:
        return self.step if self.step is not None else self.window


def _check_overrides(overrides: tuple[Override, ...]) -> None:
    for feature, metric, value in overrides:
        if metric not in JUDGED_METRICS:
            raise ConfigError(f"threshold override for {feature!r}: unknown metric {metric!r}")
        if not value >= 0:
            raise ConfigError(f"threshold override {feature}.{metric} must be >= 0")
