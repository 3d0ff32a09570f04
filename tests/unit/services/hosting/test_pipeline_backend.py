"""The control plane's side of pipeline parallelism (hosting.pipeline): Util arithmetic, a stage's compute and
idle time between two stats, the degree from the container's Environment, and the refusals made before any process
starts (a model over the envelope with its sizes; a degree > 1 without the onnx package, naming the extra)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from servekit.backends.local import InstanceHandle, InstanceSpec
from servekit.services.hosting.fleet import InstanceFailed
from servekit.services.hosting.pipeline import (
    IDLE_INSTANCE_BYTES,
    PipelineBackend,
    PipelineHandle,
    degree_of,
    period_times,
    stage_summary,
    util,
)

MiB = 2**20


def test_util_is_compute_over_compute_plus_idle_across_stages() -> None:
    assert util([(3.0, 1.0)]) == 0.75
    assert util([(1.0, 1.0), (2.0, 0.0)]) == 0.75  # (1 + 2) / (2 + 2)
    assert util([(0.0, 5.0), (0.0, 5.0)]) == 0.0
    assert util([]) is None and util([(0.0, 0.0)]) is None


def test_period_times_from_cumulative_stats() -> None:
    assert period_times({"compute_s": 1.0, "wall_s": 10.0}, {"compute_s": 1.6, "wall_s": 11.0}) == pytest.approx(
        (0.6, 0.4)
    )
    # a restarted stage's counters went back: the period counts from its start
    assert period_times({"compute_s": 5.0, "wall_s": 50.0}, {"compute_s": 0.2, "wall_s": 1.0}) == pytest.approx(
        (0.2, 0.8)
    )


def test_degree_from_the_environment() -> None:
    assert degree_of({}) == 1 and degree_of({"OPTION_PIPELINE_PARALLEL_DEGREE": " 4 "}) == 4
    for bad in ("0", "two", "-1"):
        with pytest.raises(InstanceFailed, match="must be a positive integer"):
            degree_of({"OPTION_PIPELINE_PARALLEL_DEGREE": bad})


class NoStart:
    """An inner backend that must not be asked to start anything."""

    started: list[InstanceSpec]

    def __init__(self) -> None:
        self.started = []

    async def start(self, spec: InstanceSpec) -> InstanceHandle:
        self.started.append(spec)
        return InstanceHandle(spec, "http://127.0.0.1:1", 1)

    async def stop(self, handle: InstanceHandle, grace_s: float = 10.0) -> None: ...

    def alive(self, handle: InstanceHandle) -> bool:
        return True

    def log_tail(self, handle: InstanceHandle, lines: int = 20) -> str:
        return ""

    async def close(self) -> None: ...


def onnx_dir(root: Path, size: int) -> Path:
    version = root / "m" / "1"
    version.mkdir(parents=True)
    (version / "model.onnx").write_bytes(b"\0" * size)
    return root / "m"


def spec(model_dir: Path, memory: int | None, env: dict[str, str] | None = None) -> InstanceSpec:
    return InstanceSpec("e-A-1", "m", str(model_dir), 1, memory, environment=env or {})


def test_a_model_over_the_envelope_is_refused_with_its_sizes(tmp_path: Path) -> None:
    inner = NoStart()
    backend = PipelineBackend(inner, tmp_path / "stages", idle_bytes=100 * MiB)
    model = onnx_dir(tmp_path, 64 * MiB)
    with pytest.raises(InstanceFailed) as refused:
        asyncio.run(backend.start(spec(model, 148 * MiB)))
    text = str(refused.value)
    assert "needs 164.0 MiB (an idle instance 100.0 MiB + weights 64.0 MiB)" in text and "148.0 MiB" in text
    assert "OPTION_PIPELINE_PARALLEL_DEGREE" in text and inner.started == []
    # it fits, or the type has no memory limit: started as one process, unchanged
    asyncio.run(backend.start(spec(model, 164 * MiB)))
    asyncio.run(backend.start(spec(model, None)))
    assert [s.model_dir for s in inner.started] == [str(model)] * 2


def test_a_degree_without_the_onnx_package_names_the_extra(tmp_path: Path) -> None:
    inner = NoStart()
    backend = PipelineBackend(inner, tmp_path / "stages", have_onnx=lambda: False)
    model = onnx_dir(tmp_path, 1000)
    with pytest.raises(InstanceFailed, match=r"needs the onnx package .*pip install 'servekit\[optimize\]'"):
        asyncio.run(backend.start(spec(model, None, {"OPTION_PIPELINE_PARALLEL_DEGREE": "2"})))
    handler_only = tmp_path / "h" / "1"
    handler_only.mkdir(parents=True)
    with pytest.raises(InstanceFailed, match="splits ONNX models"):
        asyncio.run(backend.start(spec(handler_only.parent, None, {"OPTION_PIPELINE_PARALLEL_DEGREE": "2"})))
    assert inner.started == [] and IDLE_INSTANCE_BYTES > 90 * MiB


def test_describe_shows_each_instance_and_its_stages() -> None:
    base = InstanceSpec("e-A-1", "m", "/m", 1)
    stages = [
        InstanceHandle(InstanceSpec(f"e-A-1-stage-{k}", "m", f"/s{k}", 1), f"http://127.0.0.1:{k + 1}") for k in (0, 1)
    ]
    handle = PipelineHandle(base, stages[0].url, 1, stages=stages, stage_bytes=[30, 34])
    assert stage_summary([InstanceHandle(base, "u")]) is None
    assert stage_summary([handle]) == [
        {
            "InstanceId": "e-A-1",
            "Stages": [
                {"Stage": 0, "InstanceId": "e-A-1-stage-0", "WeightBytes": 30, "Url": "http://127.0.0.1:1"},
                {"Stage": 1, "InstanceId": "e-A-1-stage-1", "WeightBytes": 34, "Url": "http://127.0.0.1:2"},
            ],
        }
    ]


def test_stages_start_from_the_cached_split_later_ones_first_each_in_its_envelope(tmp_path: Path) -> None:
    from servekit.services.hosting.pipeline import model_hash

    inner = NoStart()
    stages_dir = tmp_path / "stages"
    backend = PipelineBackend(inner, stages_dir, idle_bytes=10 * MiB, have_onnx=lambda: True, healthy=lambda url: True)
    model = onnx_dir(tmp_path, 1000)
    # the split made before (by another instance, or before a restart): no split process runs again
    cached = stages_dir / f"{model_hash(model / '1' / 'model.onnx')[:24]}-2"
    for k, size in enumerate((3 * MiB, 5 * MiB)):
        (cached / f"stage-{k}" / "1").mkdir(parents=True)
        (cached / f"stage-{k}" / "1" / "model.onnx").write_bytes(b"\0" * size)
    (cached / "stages.json").write_text("{}")
    env = {"OPTION_PIPELINE_PARALLEL_DEGREE": "2"}
    handle = asyncio.run(backend.start(spec(model, 16 * MiB, env)))
    assert isinstance(handle, PipelineHandle) and handle.stage_bytes == [3 * MiB, 5 * MiB]
    later, first = inner.started
    assert later.instance_id == "e-A-1-stage-1" and first.instance_id == "e-A-1-stage-0"
    assert later.model_dir == str(cached / "stage-1") and later.memory_bytes == 16 * MiB
    assert "SERVEKIT_PIPELINE_NEXT" not in later.environment
    assert first.environment["SERVEKIT_PIPELINE_NEXT"] == "http://127.0.0.1:1"  # the later stage's URL
    assert first.environment["SERVEKIT_PIPELINE_STATS"].endswith("e-A-1-stage-0.json")
    assert first.extra_args[-2:] == ("--num_inference_threads", "8")  # stage 0 takes concurrent requests
    # a stage over the envelope is refused with its own sizes, before any process starts
    inner.started.clear()
    with pytest.raises(InstanceFailed, match=r"Stage 1 of 2 needs 15\.0 MiB .* weights 5\.0 MiB.*14\.0 MiB"):
        asyncio.run(backend.start(spec(model, 14 * MiB, env)))
    assert inner.started == []


def test_tensor_parallel_refusals_name_what_is_missing(tmp_path: Path) -> None:
    inner = NoStart()
    backend = PipelineBackend(inner, tmp_path / "stages", have_torch=lambda: False)
    version = tmp_path / "t" / "1"
    version.mkdir(parents=True)
    (version / "model.pt").write_bytes(b"\0")
    tp = {"OPTION_TENSOR_PARALLEL_DEGREE": "2"}
    with pytest.raises(InstanceFailed, match=r"needs torch: pip install 'servekit\[torch\]'"):
        asyncio.run(backend.start(spec(version.parent, None, tp)))
    with pytest.raises(InstanceFailed, match="not both"):
        asyncio.run(backend.start(spec(version.parent, None, {**tp, "OPTION_PIPELINE_PARALLEL_DEGREE": "2"})))
    onnx_only = onnx_dir(tmp_path, 10)
    with pytest.raises(InstanceFailed, match="splits TorchScript models"):
        asyncio.run(backend.start(spec(onnx_only, None, tp)))
    assert inner.started == []
