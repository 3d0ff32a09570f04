"""``servekit demo``: build example models, print copy-paste requests for each protocol, and serve them."""

from __future__ import annotations

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
    typer.echo(tour(port, sagemaker_port))
    if build_only:
        return
    serve(model_config_file=str(config_path), rest_api_port=port, sagemaker_port=sagemaker_port, host=host)
