"""``servekit optimize``: a faster model version (graph optimization, int8 quantization, sklearn to ONNX) and
what it costs in accuracy, measured before it is written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from servekit.errors import ConfigError


def _sizes(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ConfigError(f"--batch-sizes must be integers separated by commas, got {text!r}") from None


def optimize(
    model: Annotated[Path, typer.Option("--model", help="Model base (its latest version is used) or version dir.")],
    out: Annotated[
        Path, typer.Option("--out", help="Model base for the new version (the next number; may be the same base).")
    ],
    quantize: Annotated[str, typer.Option("--quantize", help="int8, or none (graph optimization only).")] = "none",
    static: Annotated[
        bool, typer.Option("--static", help="Static int8 (QDQ), calibrated on --calibration; default is dynamic.")
    ] = False,
    calibration: Annotated[
        Path | None, typer.Option("--calibration", help="JSON Lines rows for --static calibration.")
    ] = None,
    validation: Annotated[
        Path | None,
        typer.Option("--validation", help="JSON Lines rows (lists, or objects keyed by feature names) to compare on."),
    ] = None,
    labels: Annotated[
        Path | None, typer.Option("--labels", help="One JSON label per line, for the --validation rows.")
    ] = None,
    label_column: Annotated[
        str | None, typer.Option("--label-column", help="Or: the key of each --validation object holding its label.")
    ] = None,
    max_accuracy_drop: Annotated[
        float,
        typer.Option(
            "--max-accuracy-drop",
            help="Refuse a larger drop of accuracy (or of agreement, without labels); regression: relative MAE.",
        ),
    ] = 0.01,
    force: Annotated[bool, typer.Option("--force", help="Write the new version even over the bound.")] = False,
    batch_sizes: Annotated[str, typer.Option("--batch-sizes", help="Batch sizes to time, e.g. 1,8,64.")] = "1,8,64",
    rounds: Annotated[int, typer.Option("--rounds", help="Timed calls per batch size and model.")] = 100,
    graph_level: Annotated[
        str,
        typer.Option("--graph-level", help="Saved graph optimization: basic, extended (portable) or all (this CPU)."),
    ] = "extended",
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Also write the comparison here (even when refused).")
    ] = None,
) -> None:
    """Optimize a model into a new version: onnxruntime graph optimization, int8 quantization (dynamic, or
    static with --static), scikit-learn converted to ONNX. Prints latency per batch size, size on disk and
    accuracy/agreement before and after; a drop over --max-accuracy-drop is refused (exit 1) unless --force.
    """
    from servekit.tools.optimize.report import render
    from servekit.tools.optimize.run import OptimizeOptions
    from servekit.tools.optimize.run import optimize as run_optimize

    try:
        options = OptimizeOptions(
            model=model,
            out=out,
            quantize=quantize,
            static=static,
            calibration=calibration,
            validation=validation,
            labels=labels,
            label_column=label_column,
            max_accuracy_drop=max_accuracy_drop,
            force=force,
            batch_sizes=_sizes(batch_sizes),
            rounds=rounds,
            graph_level=graph_level,
        )
        outcome = run_optimize(options)
    except ConfigError as exc:
        typer.echo(f"servekit: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(render(outcome))
    if json_path is not None:
        json_path.write_text(json.dumps(outcome.as_json(), indent=2) + "\n", encoding="utf-8")
    if not outcome.accepted:
        q = outcome.quality
        typer.echo(
            f"servekit: refused: the {q.drop_basis} dropped by {q.drop:.4f}, more than --max-accuracy-drop "
            f"{max_accuracy_drop}; nothing was written (--force writes it anyway)",
            err=True,
        )
        raise typer.Exit(1)
    typer.echo(f"\nwrote {outcome.version_dir}")
