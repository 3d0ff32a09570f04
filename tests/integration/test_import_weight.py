"""What an import loads, in a fresh interpreter: the serving core builds without an HTTP stack, and batch transform
and drift monitoring load no HTTP server (a front, a job or a test can take them without Starlette)."""

from __future__ import annotations

import subprocess
import sys


def _imported_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint(' '.join(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(out.stdout.split())


HTTP = {"starlette", "uvicorn", "httpx", "fastapi", "h11", "httptools"}


def test_the_serving_core_builds_without_http() -> None:
    """A gRPC front (or a test) can take the core without Starlette: build one and look at sys.modules."""
    loaded = _imported_after(
        "from servekit.config.models import ServerConfig\n"
        "from servekit.serving.core.assembly import ServingCore\n"
        "core = ServingCore(ServerConfig(models=()))\n"
        "core.threads.shutdown()"
    )
    assert "servekit.serving.core.assembly" in loaded
    assert loaded & HTTP == set()


def test_transform_and_monitor_load_no_http_server() -> None:
    loaded = _imported_after(
        "import servekit.services.transform.job, servekit.services.transform.invoke\n"
        "import servekit.services.transform.engine_local\n"
        "import servekit.services.monitoring.runs.run"
    )
    assert "servekit.services.transform.invoke" in loaded
    assert loaded & (HTTP | {"servekit.serving.protocols"}) == set()
