"""``servekit monitor`` end to end: baseline from a CSV, runs over capture files, CSV and Parquet, webhooks."""

from __future__ import annotations

import csv
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from servekit.cli.main import app
from servekit.services.monitoring.stream.windows import format_time, parse_time
from servekit.testing.capture_files import feature_rows, synthetic_features, write_capture_files

T0 = parse_time("2026-11-30T00:00:00Z")
HOUR = 3600
HOURS, ROWS = 8, 300
SHIFT_FROM = 3  # num_0 moves by +2 from this hour on: alarm on window SHIFT_FROM + 2


def _write_csv(path: Path, header: list[str], rows: list[list[Any]]) -> Path:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows([["" if v is None else v for v in r] for r in rows])
    return path


def _traffic() -> list[tuple[float, list[Any]]]:
    out = []
    for h in range(HOURS):
        cols = synthetic_features(ROWS, 50 + h)
        if h >= SHIFT_FROM:
            cols["num_0"] = cols["num_0"] + 2.0
        out += [(T0 + h * HOUR + i * (HOUR / ROWS), row) for i, row in enumerate(feature_rows(cols))]
    return out


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("monitor-cli")
    train = synthetic_features(10_000, 1)
    _write_csv(tmp / "train.csv", [*train, "label"], [[*r, i % 2] for i, r in enumerate(feature_rows(train))])
    traffic = _traffic()
    names = list(train)
    write_capture_files(tmp / "capture-json", [(t, [r]) for t, r in traffic])
    write_capture_files(tmp / "capture-csv", [(t, [r]) for t, r in traffic], encoding="CSV")
    _write_csv(tmp / "traffic.csv", ["ts", *names], [[format_time(t), *r] for t, r in traffic])
    table = pa.table(
        {
            "ts": pa.array([int(t * 1e6) for t, _ in traffic], pa.timestamp("us", tz="UTC")),
            **{n: [r[i] for _, r in traffic] for i, n in enumerate(names)},
        }
    )
    pq.write_table(table, tmp / "traffic.parquet", row_group_size=500)
    return tmp


def invoke(*args: str) -> Any:
    result = CliRunner().invoke(app, list(args))
    return result


@pytest.fixture(scope="module")
def baseline(workdir: Path) -> Path:
    r = invoke(
        "monitor",
        "baseline",
        "--data",
        str(workdir / "train.csv"),
        "--out",
        str(workdir / "base"),
        "--exclude",
        "label",
    )
    assert r.exit_code == 0, r.output
    assert "v0001" in r.output and "num_0: Fractional (numerical)" in r.output and "label" not in r.output
    return workdir / "base"


def _alarm_windows(out: Path) -> set[tuple[str, int]]:
    doc = orjson.loads((out / "metrics.json").read_bytes())
    return {(a["feature"], a["window_index"]) for a in doc["alarms"]}


@pytest.mark.parametrize(
    ("data", "extra"),
    [
        ("capture-json", []),
        ("capture-csv", []),
        ("traffic.csv", ["--timestamp-column", "ts"]),
        ("traffic.parquet", ["--timestamp-column", "ts"]),
    ],
)
def test_run_finds_the_shift_in_every_format(workdir: Path, baseline: Path, data: str, extra: list[str]) -> None:
    out = workdir / f"out-{data}"
    r = invoke(
        "monitor",
        "run",
        "--baseline",
        str(baseline),
        "--data",
        str(workdir / data),
        "--out",
        str(out),
        "--window",
        "1h",
        "--metrics",
        "ks_statistic,js_distance",
        *extra,
    )
    assert r.exit_code == 0, r.output
    assert f"{HOURS} windows ({HOURS} judged), 1 alarms" in r.output
    assert _alarm_windows(out) == {("num_0", SHIFT_FROM + 2)}
    doc = orjson.loads((out / "metrics.json").read_bytes())
    assert [w["rows"] for w in doc["windows"]] == [ROWS] * HOURS
    assert doc["warnings"] == [] and "warning" not in r.stderr  # the data's columns are the baseline's
    violations = sorted((out / "windows").glob("*/constraint_violations.json"))
    assert len(violations) == HOURS
    shifted = orjson.loads(violations[SHIFT_FROM].read_bytes())["violations"]
    assert {"num_0"} <= {v["feature_name"] for v in shifted if v["constraint_check_type"] == "baseline_drift_check"}
    prom = (out / "metrics.prom").read_text()
    assert 'servekit_monitor_feature_drifted{feature="num_0"} 1.0' in prom
    assert "servekit_monitor_alarms 1.0" in prom
    assert "<svg" in (out / "report.html").read_text()
    info = orjson.loads((out / "run.json").read_bytes())
    assert info["baseline_version"] == "v0001" and info["rows_read"] == HOURS * ROWS


def test_sliding_windows_since_until_and_fail_on_alarm(workdir: Path, baseline: Path) -> None:
    out = workdir / "out-sliding"
    r = invoke(
        "monitor",
        "run",
        "--baseline",
        str(baseline),
        "--data",
        str(workdir / "capture-json"),
        "--out",
        str(out),
        "--window",
        "2h",
        "--step",
        "1h",
        "--since",
        "2026-11-30T01:00:00Z",
        "--until",
        "2026-11-30T07:00:00Z",
        "--consecutive",
        "2",
        "--fail-on-alarm",
    )
    assert r.exit_code == 3, r.output
    doc = orjson.loads((out / "metrics.json").read_bytes())
    assert [(w["start"][11:16], w["end"][11:16]) for w in doc["windows"]] == [
        ("01:00", "03:00"),
        ("02:00", "04:00"),
        ("03:00", "05:00"),
        ("04:00", "06:00"),
        ("05:00", "07:00"),
    ]
    assert [w["rows"] for w in doc["windows"]] == [2 * ROWS] * 5


class _Hook(BaseHTTPRequestHandler):
    received: list[Any] = []

    def do_POST(self) -> None:
        _Hook.received.append(orjson.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def hook_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Hook.received = []
    yield f"http://127.0.0.1:{server.server_address[1]}/alerts"
    server.shutdown()
    server.server_close()


def test_real_process_posts_the_alarm_to_a_webhook(workdir: Path, baseline: Path, hook_url: str) -> None:
    script = Path(sys.executable).parent / "servekit"
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "servekit.cli.main"]
    out = workdir / "out-webhook"
    proc = subprocess.run(
        [
            *cmd,
            "monitor",
            "run",
            "--baseline",
            str(baseline),
            "--data",
            str(workdir / "capture-json"),
            "--out",
            str(out),
            "--window",
            "1h",
            "--metrics",
            "ks_statistic",
            "--webhook",
            hook_url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "webhooks: 1 delivered, 0 failed, 0 dropped" in proc.stdout
    (alert,) = _Hook.received
    assert (alert["feature"], alert["metric"], alert["window_index"]) == ("num_0", "ks_pvalue", SHIFT_FROM + 2)
    assert alert["value"] <= alert["threshold"] and alert["report"].endswith("report.html")  # Holm p <= alpha
    events = [orjson.loads(line)["event"] for line in (out / "alerts.jsonl").read_bytes().splitlines()]
    assert events == ["alert", "delivered"]


def test_current_baseline_unreadable_falls_back_to_previous(workdir: Path, baseline: Path) -> None:
    root = workdir / "base-versions"
    for _ in range(2):
        r = invoke(
            "monitor", "baseline", "--data", str(workdir / "train.csv"), "--out", str(root), "--exclude", "label"
        )
        assert r.exit_code == 0, r.output
    (root / "v0002" / "baseline.json").write_text("garbage")
    out = workdir / "out-fallback"
    r = invoke("monitor", "run", "--baseline", str(root), "--data", str(workdir / "capture-json"), "--out", str(out))
    assert r.exit_code == 0, r.output
    info = orjson.loads((out / "run.json").read_bytes())
    assert info["baseline_version"] == "v0001" and "v0002" in info["baseline_fallback_reason"]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--window", "6x"], 2, "bad duration"),
        (["--threshold", "num_0.nope=1"], 2, "bad threshold"),
        (["--since", "yesterday"], 2, "bad time"),
        (["--webhook", "ftp://x"], 2, "must be an http"),
    ],
)
def test_bad_flags_exit_2(workdir: Path, baseline: Path, args: list[str], code: int, message: str) -> None:
    r = invoke(
        "monitor",
        "run",
        "--baseline",
        str(baseline),
        "--data",
        str(workdir / "capture-json"),
        "--out",
        str(workdir / "out-bad"),
        *args,
    )
    assert r.exit_code == code
    assert message in r.output


def test_missing_inputs_exit_1(workdir: Path, baseline: Path) -> None:
    r = invoke(
        "monitor",
        "run",
        "--baseline",
        str(workdir / "nope"),
        "--data",
        str(workdir / "capture-json"),
        "--out",
        str(workdir / "o"),
    )
    assert r.exit_code == 1 and "no baseline" in r.output
    r = invoke(
        "monitor",
        "run",
        "--baseline",
        str(baseline),
        "--data",
        str(workdir / "traffic.csv"),
        "--out",
        str(workdir / "o"),
    )
    assert r.exit_code == 1 and "--timestamp-column" in r.output


UNREADABLE = {
    "empty.csv": (b"", "empty.csv: empty CSV file (the first line must name the columns)"),
    "latin1.csv": (
        "ts,num_0\n2026-11-30T00:00:00Z,caf\u00e9\n".encode("latin-1"),
        "latin1.csv: not UTF-8 text (invalid bytes in column 'num_0'); save the file as UTF-8",
    ),
    "latin1-header.csv": (
        "ts,n\u00fam\n2026-11-30T00:00:00Z,1\n".encode("latin-1"),
        "latin1-header.csv: not UTF-8 text (byte 0xfa at position 4 of the header line); save the file as UTF-8",
    ),
}


@pytest.mark.parametrize("name", sorted(UNREADABLE))
@pytest.mark.parametrize("command", ["baseline", "run"])
def test_an_empty_or_non_utf8_csv_is_one_line_and_exit_2(
    workdir: Path, baseline: Path, tmp_path: Path, name: str, command: str
) -> None:
    """Issue 9, item 10: not Arrow's 90-line traceback but one line naming the file and the problem."""
    content, problem = UNREADABLE[name]
    data = tmp_path / name
    data.write_bytes(content)
    out = ["--out", str(tmp_path / "out")]
    args = ["--data", str(data), *out] if command == "baseline" else ["--baseline", str(baseline), "--data", str(data)]
    extra = ["--timestamp-column", "ts"] if command == "run" else []
    r = invoke("monitor", command, *args, *(out if command == "run" else []), *extra)
    assert r.exit_code == 2, r.output
    assert isinstance(r.exception, SystemExit)  # typer.Exit, not an exception escaping
    assert r.stderr == f"servekit: {tmp_path}/{problem}\n"
    assert "Traceback" not in r.output and "Arrow" not in r.output


def _relabelled(workdir: Path, tmp_path: Path, rename: dict[str, str], add: str | None = None) -> Path:
    """traffic.csv with columns renamed, and optionally a constant extra column."""
    with (workdir / "traffic.csv").open(newline="") as f:
        rows = list(csv.reader(f))
    header = [rename.get(c, c) for c in rows[0]]
    body = rows[1:]
    if add:
        header.append(add)
        body = [[*r, "x"] for r in body]
    return _write_csv(tmp_path / "traffic.csv", header, body)


@pytest.mark.parametrize(
    ("rename", "add", "warning"),
    [
        (
            {"num_0": "num_zero"},
            None,
            "the data's columns do not match the baseline's: missing 'num_0' (judged as all missing); "
            "extra 'num_zero' (ignored); a renamed column shows as one missing and one extra",
        ),
        ({}, "region", "the data's columns do not match the baseline's: extra 'region' (ignored)"),
    ],
)
def test_a_header_that_does_not_match_the_baseline_is_named(
    workdir: Path, baseline: Path, tmp_path: Path, rename: dict[str, str], add: str | None, warning: str
) -> None:
    """Issue 9, item 10: an extra column was ignored silently and a renamed one only showed up as drift."""
    data = _relabelled(workdir, tmp_path, rename, add)
    out = tmp_path / "out"
    r = invoke(
        "monitor",
        "run",
        "--baseline",
        str(baseline),
        "--data",
        str(data),
        "--out",
        str(out),
        "--timestamp-column",
        "ts",
    )
    assert r.exit_code == 0, r.output
    assert r.stderr == f"servekit: warning: {warning}\n"
    assert orjson.loads((out / "metrics.json").read_bytes())["warnings"] == [warning]
    run_doc = orjson.loads((out / "run.json").read_bytes())
    assert run_doc["warnings"] == [warning]
    assert run_doc["missing_columns"] == (["num_0"] if rename else [])
    assert run_doc["extra_columns"] == (["num_zero"] if rename else ["region"])
