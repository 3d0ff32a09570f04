"""servekit's ASGI app for other HTTP servers (granian, hypercorn): ``SERVEKIT_BENCH_MODEL`` is the model base path,
``SERVEKIT_BENCH_NAME`` its name, ``SERVEKIT_BENCH_BATCHING`` an optional batching parameters file. Models load in
the app's lifespan, as under ``servekit serve`` (which adds its connection guard; these servers have their own)."""

import os

from servekit.config.loading import load_batching_file
from servekit.config.models import ModelConfig, ServerConfig
from servekit.launch.serve import served_app

_batching = os.environ.get("SERVEKIT_BENCH_BATCHING")
app = served_app(
    ServerConfig(
        models=(ModelConfig(name=os.environ["SERVEKIT_BENCH_NAME"], base_path=os.environ["SERVEKIT_BENCH_MODEL"]),),
        file_system_poll_wait_seconds=0,
        batching=load_batching_file(_batching) if _batching else None,
    )
)
