"""What SageMaker's first-party algorithms (``kmeans``, …) share in a training job's sandbox: their hyperparameters
read and checked as SageMaker checks them (an unknown name, a missing required one, a value out of range end the job
with a ClientError naming it), their channels read as RecordIO-protobuf (the SDK's ``RecordSet``, the default) or
CSV, their metrics printed as the containers print them and as servekit's job reads them (``[0]\\ttest-msd:…``:
``test:msd`` in ``FinalMetricDataList``), and the failure file."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from servekit.serving.codecs import recordio_protobuf

CONFIG = Path("/opt/ml/input/config")
DATA = Path("/opt/ml/input/data")
MODEL_DIR = Path("/opt/ml/model")
FAILURE = Path("/opt/ml/output/failure")
CSV = ("text/csv", "csv")


class AlgorithmError(Exception):
    """The job's own error (bad hyperparameters or data): ``ClientError: <message>``."""


@dataclass(frozen=True)
class Param:
    """One hyperparameter: its parser (which raises ValueError with what it expects) and default (None:
    required)."""

    parse: Callable[[str], Any]
    default: Any = None
    required: bool = False


def integer(low: int, high: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(float(text))
        if value < low or (high is not None and value > high):
            raise ValueError(f"an integer in [{low}, {high if high is not None else 'inf'}]")
        return value

    return parse


def real(low: float, high: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = float(text)
        if not low <= value <= high:
            raise ValueError(f"a number in [{low}, {high}]")
        return value

    return parse


def one_of(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"one of {', '.join(choices)}")
        return text

    return parse


def boolean(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise ValueError("true or false")
    return text.lower() == "true"


def hyperparameters(raw: Mapping[str, Any], table: Mapping[str, Param]) -> dict[str, Any]:
    """``raw`` (SageMaker's strings, the SDK's ``"value"`` quoting stripped) checked against ``table``."""
    unknown = sorted(k for k in raw if k not in table and not k.startswith("sagemaker_") and not k.startswith("_"))
    if unknown:
        raise AlgorithmError(f"Additional hyperparameters are not allowed ({', '.join(unknown)} was unexpected)")
    out: dict[str, Any] = {}
    for name, param in table.items():
        if name not in raw:
            if param.required:
                raise AlgorithmError(f"Missing required hyperparameter: {name}")
            out[name] = param.default
            continue
        text = str(raw[name]).strip().strip('"')
        try:
            out[name] = param.parse(text)
        except ValueError as exc:
            raise AlgorithmError(f"Hyperparameter {name}: {text!r} is not valid (expected {exc})") from None
    return out


def channel(name: str, required: bool = True) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64] | None] | None:
    """A channel's rows and labels: every file's RecordIO-protobuf records (the default content type) or CSV rows
    (features only); None for an optional channel that is absent."""
    config = json.loads((CONFIG / "inputdataconfig.json").read_text())
    if name not in config:
        if required:
            raise AlgorithmError(f"The {name} channel is required")
        return None
    kind = str(config[name].get("ContentType") or recordio_protobuf.CONTENT_TYPE).split(";")[0].strip().lower()
    files = sorted(p for p in (DATA / name).rglob("*") if p.is_file() and not p.name.startswith("."))
    if not files:
        raise AlgorithmError(f"The {name} channel has no files")
    xs, ys = [], []
    for f in files:
        if kind in CSV:
            try:
                xs.append(np.loadtxt(f, delimiter=",", ndmin=2))
            except ValueError as exc:
                raise AlgorithmError(f"{f.name} is not numeric CSV: {exc}") from None
        elif kind == recordio_protobuf.CONTENT_TYPE:
            try:
                x, y = recordio_protobuf.read(f.read_bytes())
            except recordio_protobuf.RecordError as exc:
                raise AlgorithmError(f"{f.name}: {exc}") from None
            xs.append(x)
            if y is not None:
                ys.append(y)
        else:
            raise AlgorithmError(
                f"Content type {kind} of the {name} channel is not supported: use {recordio_protobuf.CONTENT_TYPE} "
                "or text/csv"
            )
    widths = {x.shape[1] for x in xs}
    if len(widths) != 1:
        raise AlgorithmError(f"The {name} channel's files have different numbers of features: {sorted(widths)}")
    return np.vstack(xs), (np.concatenate(ys) if ys and len(ys) == len(xs) else None)


def check_width(x: npt.NDArray[Any], feature_dim: Any, channel_name: str) -> None:
    """The channel's records have ``feature_dim`` features (ClientError naming both otherwise)."""
    if x.shape[1] != feature_dim:
        raise AlgorithmError(f"feature_dim is {feature_dim} but the {channel_name} channel's records have {x.shape[1]}")


def report(channel_name: str, metrics: Mapping[str, float]) -> None:
    """A channel's metrics as the containers print them (``#test_score (algo-1) : ('msd', 1.2)``) and as one
    evaluation line servekit reads into ``FinalMetricDataList`` (``test:msd``)."""
    for name, value in metrics.items():
        say(f"#{channel_name}_score (algo-1) : ('{name}', {value})")
    say("[0]\t" + "\t".join(f"{channel_name}-{k}:{v:.10g}" for k, v in metrics.items()))


def say(line: str) -> None:
    """A line of the job's log (its stdout, which the plane ships to CloudWatch Logs and reads metrics from)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def run(main: Callable[[], None]) -> int:
    """``main`` with its AlgorithmError as the job's ClientError (in the failure file)."""
    try:
        main()
    except AlgorithmError as exc:
        FAILURE.parent.mkdir(parents=True, exist_ok=True)
        FAILURE.write_text(f"ClientError: {exc}")
        sys.stderr.write(f"ClientError: {exc}\n")
        return 2
    return 0


def raw_hyperparameters() -> dict[str, Any]:
    path = CONFIG / "hyperparameters.json"
    return dict(json.loads(path.read_text())) if path.exists() else {}


def labelled_channel(
    name: str, required: bool = True
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]] | None:
    """A supervised algorithm's channel: its rows and labels, the RecordIO records' ``label`` or, in CSV, each row's
    first column (SageMaker's CSV format for supervised training); AlgorithmError when it has no labels."""
    found = channel(name, required)
    if found is None:
        return None
    x, y = found
    config = json.loads((CONFIG / "inputdataconfig.json").read_text())
    kind = str(config[name].get("ContentType") or recordio_protobuf.CONTENT_TYPE).split(";")[0].strip().lower()
    if kind in CSV:
        if x.shape[1] < 2:
            raise AlgorithmError(f"The {name} channel's CSV rows need a label (the first column) and features")
        return x[:, 1:], x[:, 0].copy()
    if y is None:
        raise AlgorithmError(f"The {name} channel's records have no label (label['values'])")
    return x, y


def report_channels(scores: Mapping[str, Mapping[str, float]]) -> None:
    """Several channels' metrics (``validation`` and ``test``) as :func:`report` prints them, in ONE evaluation line:
    servekit's job reads the last such line into ``FinalMetricDataList``."""
    items = []
    for channel_name, metrics in scores.items():
        for name, value in metrics.items():
            say(f"#{channel_name}_score (algo-1) : ('{name}', {value})")
            items.append(f"{channel_name}-{name}:{value:.10g}")
    if items:
        say("[0]\t" + "\t".join(items))
