"""``servekit demo``: build example models, print copy-paste requests for each protocol, and serve them."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Annotated

import typer

from servekit.cli.serve_cmd import serve


def demo(
    directory: Annotated[Path, typer.Option("--dir", help="Where to build the example models.")] = Path("demo-models"),
    port: Annotated[int, typer.Option("--port", help="REST port.")] = 8501,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    sagemaker_port: Annotated[int, typer.Option("--sagemaker-port", help="SageMaker port.")] = 8080,
    build_only: Annotated[bool, typer.Option("--build-only", help="Build the models and exit.")] = False,
) -> None:
    """Build example models, print copy-paste requests for each protocol, and serve them."""
    from servekit.tools.demo.build import build_demo
    from servekit.tools.demo.tour import tour

    try:
        config_path = build_demo(directory)
    except ImportError as exc:  # the demo's models are trained here, with the demo extra's libraries
        typer.echo(
            f"servekit demo builds its example models with scikit-learn and skl2onnx ({exc.name} is missing): "
            "pip install 'servekit[demo]' (make demo does it)",
            err=True,
        )
        raise typer.Exit(2) from None
    typer.echo(f"built example models under {directory.resolve()} (config: {config_path})\n")
    if build_only:
        typer.echo(tour(port, sagemaker_port))
        return
    typer.echo(f"starting the server on {host}:{port} and {host}:{sagemaker_port} ...")

    def announce() -> None:  # the requests, once both ports answer: pasted earlier they would be refused
        if _wait_ready(host, port, sagemaker_port, READY_TIMEOUT_S):
            typer.echo(tour(port, sagemaker_port))
            typer.echo("servekit demo is ready: the requests above work now. Ctrl-C stops it.")

    threading.Thread(target=announce, daemon=True, name="servekit-demo-ready").start()
    serve(model_config_file=str(config_path), rest_api_port=port, sagemaker_port=sagemaker_port, host=host)


READY_TIMEOUT_S = 300.0


def _wait_ready(host: str, port: int, sagemaker_port: int, timeout_s: float) -> bool:
    """Whether the server says it is ready within ``timeout_s`` (it listens, then loads the models): KServe's
    ``/v2/health/ready`` on the REST port and SageMaker's ``/ping``, both 200."""
    deadline = time.monotonic() + timeout_s
    address = "127.0.0.1" if host in ("0.0.0.0", "") else "[::1]" if host == "::" else host
    for url in (f"http://{address}:{port}/v2/health/ready", f"http://{address}:{sagemaker_port}/ping"):
        while True:
            try:
                with urllib.request.urlopen(url, timeout=2) as answer:
                    if answer.status == 200:
                        break
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)  # polling a server this process is starting: there is no event to wait on
    return True
