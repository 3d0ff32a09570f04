"""servekit recommend takes the same body function as servekit bench (issue 32): ``--payload PY_FILE:FUNCTION``
builds each request's body when it is sent (fresh ids), where a file of bodies replays them."""

from __future__ import annotations

import asyncio
from pathlib import Path

from servekit.tools.bench.dynamic import is_payload_function
from servekit.tools.bench.spec import Target
from servekit.tools.recommend.measure import workload_for


def test_a_body_function_makes_a_fresh_body_for_each_request(tmp_path: Path) -> None:
    fn = tmp_path / "payload.py"
    fn.write_text("import itertools\nn = itertools.count()\n\ndef body():\n    return {'request': next(n)}\n")
    target = Target.from_url("http://127.0.0.1:9")  # nothing is sent: the workload is only built
    workload = asyncio.run(workload_for(target, "credit", f"{fn}:body", "application/json"))
    assert workload.make is not None and workload.payload_bodies_per_s
    first, second = workload.make(0), workload.make(1)
    assert first.startswith(b"POST /invocations HTTP/1.1")
    assert b'{"request":' in first and first != second  # fresh, not replayed


def test_what_counts_as_a_body_function() -> None:
    assert is_payload_function("bodies/credit.py:body")
    assert not is_payload_function("samples.jsonl")
    assert not is_payload_function("C:/data/samples.jsonl")  # a path with a colon is a file of bodies
    assert not is_payload_function("credit.py:not-a-name")
