"""servekit bench's wrk engine: the generated Lua script, and reading wrk's output (its JSON line or its text)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import orjson
import pytest

from servekit.tools.bench import wrk
from servekit.tools.bench.selftest import TrivialServer
from servekit.tools.bench.spec import BenchSpec, Target
from servekit.tools.bench.workload import InputSpec, build_workload

IRIS = [InputSpec("X", "FP32", (-1, 4))]

TEXT = """\
Running 1s test @ http://127.0.0.1:18501/
  1 threads and 2 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   663.54us  596.99us  10.53ms   95.41%
    Req/Sec     3.28k   710.38     4.47k    72.73%
  Latency Distribution
     50%  572.00us
     75%  703.00us
     90%    0.88ms
     99%    3.02ms
  3590 requests in 1.10s, 0.91MB read
  Socket errors: connect 0, read 2, write 1, timeout 4
  Non-2xx or 3xx responses: 90
Requests/sec:   3258.04
Transfer/sec:    849.87KB
"""
LINE = {
    "requests": 3590,
    "duration_us": 1101888,
    "errors": {"connect": 0, "read": 2, "write": 1, "status": 90, "timeout": 4},
    "statuses": {"200": 3500, "503": 90},
    "latency_us": {"mean": 663.5, "p50": 572.0, "p90": 883.0, "p95": 1203.0, "p99": 3023.0, "max": 10534.0},
    "server": {
        "samples": 4,
        "sum_queue": 0.4,
        "sum_model": 2.0,
        "sum_total": 4.0,
        "queue": [0.1, 0.1, 0.1, 0.1],
        "model": [0.5, 0.5, 0.5, 0.5],
        "total": [1.0, 1.0, 1.0, 1.0],
    },
}


def test_lua_string_escapes_every_byte() -> None:
    assert wrk.lua_string(b'a"b\\c\n') == '"a\\034b\\092c\\010"'
    assert wrk.lua_string(bytes([0, 255, 49])) == '"\\000\\2551"'  # three digits: a following digit stays


def test_script_holds_the_workload() -> None:
    w = build_workload(BenchSpec(url="http://h:1", model="iris", protocol="kserve", binary=True), IRIS)
    script = wrk.lua_script(w)
    assert '"/v2/models/iris/infer"' in script and '"POST"' in script
    assert script.count('["Inference-Header-Content-Length"]') == len(w.bodies)
    assert "function done(summary, latency, requests)" in script and wrk.MARKER in script


def test_parse_text() -> None:
    t = wrk.parse_text(TEXT)
    assert t["requests"] == 3590 and t["duration_s"] == pytest.approx(1.1)
    assert t["latency_ms"] == pytest.approx(
        {"mean": 0.66354, "max": 10.53, "p50": 0.572, "p75": 0.703, "p90": 0.88, "p99": 3.02}
    )
    assert t["errors"] == {"connect": 0, "read": 2, "write": 1, "timeout": 4}
    assert t["non_2xx"] == 90 and t["requests_per_s"] == 3258.04


def test_phase_from_json_line() -> None:
    out = TEXT + wrk.MARKER + orjson.dumps(LINE).decode() + "\n"
    p = wrk.phase_from_output(out, concurrency=2, rows_per_request=2).to_json()
    assert p["loop"] == "closed" and p["concurrency"] == 2
    assert p["requests"] == 3590 + 3 and p["ok"] == 3500
    assert p["errors"] == {"503": 90, "connection": 3, "timeout": 4}
    assert p["latency_ms"]["p95"] == pytest.approx(1.203) and p["latency_ms"]["max"] == pytest.approx(10.534)
    assert p["throughput"]["rows_per_s"] == pytest.approx(7000 / 1.101888)
    s = p["server_ms"]
    assert s["samples"] == 4 and s["total"] == {"mean": 1.0, "p99": 1.0} and s["queue"]["mean"] == pytest.approx(0.1)
    assert s["overhead"] == {"mean": pytest.approx(0.6635 - 1.0), "p99": None}


def test_phase_from_text_only() -> None:
    p = wrk.phase_from_output(TEXT, concurrency=2, rows_per_request=1).to_json()
    assert p["ok"] == 3500 and p["errors"] == {"non-2xx": 90, "connection": 3, "timeout": 4}
    assert p["latency_ms"]["p99"] == pytest.approx(3.02) and p["server_ms"] is None


def test_command() -> None:
    cmd = wrk.command(Target("127.0.0.1", 8501, False), "/tmp/s.lua", 64, 2.5, 30)
    assert cmd[0] == "wrk" and "-c64" in cmd and "-d3s" in cmd and "--latency" in cmd
    assert cmd[-1] == "http://127.0.0.1:8501/"


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed")
def test_wrk_runs_the_generated_script(tmp_path: Path) -> None:
    """The real wrk with the generated script (binary bodies included) against the trivial server."""

    async def main() -> dict[str, object]:
        server = await asyncio.get_running_loop().create_server(TrivialServer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        spec = BenchSpec(url=f"http://127.0.0.1:{port}", model="m", protocol="kserve", binary=True)
        async with server:
            stats = await wrk.run_phase(spec.target, build_workload(spec, IRIS), 2, 1.0, 5.0)
            server.close()
        return stats.to_json()

    p = asyncio.run(main())
    assert isinstance(p["ok"], int) and p["ok"] > 0 and p["errors"] == {}
    assert p["server_ms"] is not None and p["latency_ms"] is not None
