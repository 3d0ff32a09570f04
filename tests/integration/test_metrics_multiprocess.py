"""A scrape of a server with ``--workers N`` while a worker restarts (issue 46): the restarted worker's metrics file
exists before prometheus_client has written its header, and reading it failed the whole scrape with
``struct.error``. The scrape now answers the other workers' values. Run in a process of its own: prometheus_client
chooses multiprocess values when it is first imported, from PROMETHEUS_MULTIPROC_DIR."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRAPE = """
import sys
from pathlib import Path
from servekit.serving.metrics import Metrics

folder = Path(sys.argv[1])
metrics = Metrics(multiprocess_dir=str(folder))
for _ in range(3):
    metrics.on_request(model="iris", version="1", api="predict", protocol="rest", code=None, seconds=0.01)
(folder / "counter_999999.db").write_bytes(b"")  # a worker that is starting: its file, not yet its header
(folder / "histogram_999999.db").write_bytes(b"\\x00\\x00")
text = metrics.render().decode()
line = next(ln for ln in text.splitlines() if ln.startswith("servekit_requests_total{") and 'model="iris"' in ln)
print(line)
"""


def test_a_scrape_while_a_worker_restarts_answers_the_others(tmp_path: Path) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", SCRAPE, str(tmp_path)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith(" 3.0"), done.stdout
