"""servekit bench's load generator is a client: imported in a fresh Python (a child process, so not a unit test: this
one's modules are already loaded), it pulls in none of the server."""

from __future__ import annotations

import subprocess
import sys


def test_bench_loads_no_server_code() -> None:
    """The load generator is a client: importing it must not pull in the server (or its start-up cost)."""
    code = (
        "import sys, servekit.tools.bench.runner, servekit.tools.bench.selftest\n"
        "server = ('servekit.serving.protocols', 'servekit.serving.lifecycle', 'servekit.serving.runtime',\n"
        "          'servekit.serving.core')\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('starlette', 'uvicorn', 'onnxruntime')\n"
        "       or m.startswith(server)]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
