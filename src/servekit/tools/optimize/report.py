"""The comparison as a table for people (the JSON form is :meth:`servekit.tools.optimize.run.Outcome.as_json`)."""

from __future__ import annotations

from servekit.tools.optimize.run import Outcome


def _bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    size = n / 1024
    for unit in ("KiB", "MiB"):
        if size < 1024:
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def _num(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render(outcome: Outcome) -> str:
    o, q = outcome, outcome.quality
    target = str(o.version_dir) if o.version_dir else "(not written)"
    lines = [
        f"servekit optimize: {o.source.version_dir} ({o.source.runtime}) -> {target} (onnx)",
        *(f"  - {step}" for step in o.steps),
        "",
        f"latency, ms (in process through servekit's runtimes, {o.options.rounds} interleaved rounds)",
        f"{'batch':>7} {'before p50':>11} {'after p50':>10} {'before p90':>11} {'after p90':>10} {'speedup':>8}",
    ]
    for lat in o.latency:
        lines.append(
            f"{lat.batch_size:>7} {lat.before_p50_ms:>11.3f} {lat.after_p50_ms:>10.3f} "
            f"{lat.before_p90_ms:>11.3f} {lat.after_p90_ms:>10.3f} {lat.speedup:>7.2f}x"
        )
    ratio = o.size_after / o.size_before if o.size_before else 0.0
    lines += [
        "",
        f"size on disk: {_bytes(o.size_before)} -> {_bytes(o.size_after)} ({ratio:.2f}x)",
        "",
        f"validation: {q.rows} rows from {o.data_source}; {q.task} on signature {q.signature!r} ({q.output})",
    ]
    if q.accuracy_before is not None:
        lines.append(f"  accuracy     before {_num(q.accuracy_before)}   after {_num(q.accuracy_after)}")
    if q.mae_before is not None:
        lines.append(f"  MAE          before {_num(q.mae_before)}   after {_num(q.mae_after)}")
        lines.append(f"  RMSE         before {_num(q.rmse_before)}   after {_num(q.rmse_after)}")
    if q.agreement is not None:
        lines.append(f"  agreement    {_num(q.agreement)} of rows get the same class from both versions")
    for name, diff in sorted(q.output_diff.items()):
        lines.append(f"  {name:<12} max |diff| {diff['max_abs']:.3g}   mean |diff| {diff['mean_abs']:.3g}")
    verdict = "within" if q.drop <= o.options.max_accuracy_drop else "OVER"
    lines.append(f"  drop         {q.drop:.4f} ({q.drop_basis}); {verdict} the bound {o.options.max_accuracy_drop}")
    lines += [f"  note: {note}" for note in o.notes]
    if o.forced:
        lines.append("written anyway (--force)")
    return "\n".join(lines)
