#!/usr/bin/env python3
"""A burst from idle on a fast model (issue 34): how many requests the overload gate refuses when a quiet server
meets a jump in connections.

    flock /tmp/servekit-bench.lock python3 benchmarks/burst_bench.py [NAME=SRC[:FLAGS] ...]   (default head=src)

``FLAGS``: more ``servekit serve`` flags for that tree, space separated (``t30=src:--overload_target_ms 30``).

For each source tree (``SRC`` goes on ``PYTHONPATH``), each burst size (64, 128, 256) and unbatched / batched: a fresh
``servekit serve`` of the tiny model, ``wrk -c1`` for 2 s, then ``wrk -cN`` for 3 s; prints req/s, requests done and
the non-2xx answers (the gate's 503s) of the burst. Loopback only.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import tiny  # noqa: E402
from run import free_port, server  # noqa: E402

WORK = Path(tempfile.mkdtemp(prefix="servekit-burst-"))


def run(src: str, flags: list[str], conns: int, lua: Path) -> str:
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1/models/tiny:predict"
    cmd = [sys.executable, "-m", "servekit.cli.main", "serve", "--model_name", "tiny", "--model_base_path"]
    cmd += [str(WORK / "tiny"), "--rest_api_port", str(port), *flags]
    with server(cmd, port, "/v1/models/tiny:predict", env={"PYTHONPATH": src}):  # started, answering, stopped
        subprocess.run(["wrk", "-t1", "-c1", "-d2s", "-s", str(lua), url], capture_output=True, check=True)
        out = subprocess.run(
            ["wrk", "-t1", f"-c{conns}", "-d3s", "-s", str(lua), url], capture_output=True, text=True, check=True
        ).stdout
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)  # type: ignore[union-attr]
    done = re.search(r"(\d+) requests in", out).group(1)  # type: ignore[union-attr]
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return f"{rps} req/s, {done} done, non-2xx {bad.group(1) if bad else 0}"


def main() -> None:
    tiny(WORK / "tiny" / "1")
    lua = WORK / "post.lua"
    lua.write_text(
        'wrk.method = "POST"\nwrk.body = \'{"instances": [[1.0, 2.0, 3.0, 4.0]]}\'\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
    )
    targets = [a.partition("=")[::2] for a in sys.argv[1:]] or [("head", "src")]
    for conns in (64, 128, 256):
        for name, spec in targets:
            src, _, extra = spec.partition(":")
            for flags in ([], ["--enable_batching"]):
                got = run(src, [*flags, *extra.split()], conns, lua)
                print(f"c={conns} {name} {' '.join(flags) or 'unbatched'}: {got}", flush=True)


if __name__ == "__main__":
    main()
