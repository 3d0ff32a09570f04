"""Pipeline parallelism of an ONNX model (``OPTION_PIPELINE_PARALLEL_DEGREE=N`` in the container's Environment).

:class:`PipelineBackend` wraps the instance backend. An instance of a variant whose model asks for N stages is N
``servekit serve`` processes, each in its own copy of the instance type's envelope (vCPUs, memory watchdog): the
model is split once, by a one-shot ``python -m servekit.parallel.split`` process outside every envelope, into
per-stage model directories cached under the plane's home by the model file's SHA-256 and the degree; each stage
process then loads only its own directory. Stage 0 is the instance the gateway routes to: it drives each request
through the later stages (``servekit.parallel.stage``). This module knows no tensors: it runs the split as a
process, reads its ``stages.json`` and the stages' stats files, and starts processes.

The envelope is checked before any process starts: an ONNX model needs an idle instance (:data:`IDLE_INSTANCE_BYTES`)
plus its weights (the model file's bytes); one that does not fit the instance type's memory fails the endpoint with
the sizes, and a stage is held to the same rule with its own weights.

``OPTION_TENSOR_PARALLEL_DEGREE=N`` on a TorchScript MLP runs the instance as N ranks the same way
(``servekit.parallel.tensor`` splits the Linear weights; the ranks join a gloo group at a port chosen here), each
rank counted as an idle torch instance (:data:`TORCH_IDLE_INSTANCE_BYTES`) plus its shard.

:class:`PipelineMetrics` publishes, per stage, the compute and idle seconds of each period
(``StageComputeTime``/``StageIdleTime``, dimension ``Stage``) and per variant ``PipelineUtil`` =
T_compute / (T_compute + T_idle) over its stages (:func:`util`), in ``/aws/sagemaker/Endpoints``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from servekit._utils.background import BackgroundLoop, until_next_bucket
from servekit.backends.local import InstanceHandle, InstanceSpec, ReplicaBackend, free_port
from servekit.services.cloudwatch.store import INSTANCE_NAMESPACE, MetricsStore
from servekit.services.hosting.fleet import InstanceFailed

if TYPE_CHECKING:
    from servekit.services.hosting.fleet import EndpointController

log = logging.getLogger(__name__)

DEGREE_ENV = "OPTION_PIPELINE_PARALLEL_DEGREE"  # the name SageMaker's large-model inference containers use
MICRO_BATCHES_ENV = "OPTION_PIPELINE_MICRO_BATCHES"
NEXT_ENV = "SERVEKIT_PIPELINE_NEXT"  # stage 0: the later stages' URLs (servekit.parallel.stage reads it)
STATS_ENV = "SERVEKIT_PIPELINE_STATS"  # each stage: where it writes its compute and wall seconds
# What an idle instance is counted as: an idle `servekit serve` with onnxruntime loaded measured 91 MiB resident
# here (Python 3.11, onnxruntime 1.32); rounded up for its threads' stacks and allocator arenas.
IDLE_INSTANCE_BYTES = 128 * 2**20
ONNX_EXTRA = "servekit[optimize]"
TENSOR_DEGREE_ENV = "OPTION_TENSOR_PARALLEL_DEGREE"
TP_MASTER_ENV, TP_RANK_ENV, TP_WORLD_ENV = "SERVEKIT_TP_MASTER", "SERVEKIT_TP_RANK", "SERVEKIT_TP_WORLD"
# A torch rank: importing torch alone adds 206 MiB resident here (torch 2.13, CPU) to the idle instance's 91 MiB.
TORCH_IDLE_INSTANCE_BYTES = 384 * 2**20
TORCH_EXTRA = "servekit[torch]"

STAGE0_THREADS_PER_STAGE = 4  # stage 0's request threads per stage of the pipeline

MiB = 2**20


def degree_of(environment: Mapping[str, str], name: str = DEGREE_ENV) -> int:
    """The pipeline (or, by ``name``, tensor) degree a container's Environment asks for (1 when it asks for none)."""
    raw = environment.get(name, "").strip()
    if not raw:
        return 1
    if not raw.isdigit() or int(raw) < 1:
        raise InstanceFailed(f"{name} must be a positive integer, got {raw!r}")
    return int(raw)


def onnx_model_file(model_dir: str | os.PathLike[str]) -> Path | None:
    """The one ``.onnx`` file of the model's newest numeric version (None when there is not exactly one)."""
    versions = _versions(model_dir)
    if not versions:
        return None
    found = list(versions[-1].glob("*.onnx"))
    return found[0] if len(found) == 1 else None


def _versions(model_dir: str | os.PathLike[str]) -> list[Path]:
    """The model's numeric version folders, oldest first (none when the directory is missing: the instance then
    fails as it would without this module, with servekit serve's own reason)."""
    base = Path(model_dir)
    if not base.is_dir():
        return []
    return sorted((p for p in base.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))


def torch_model_file(model_dir: str | os.PathLike[str]) -> Path | None:
    """The one TorchScript file (``.pt``/``.pth``) of the model's newest numeric version, if there is exactly one."""
    versions = _versions(model_dir)
    found = [p for p in versions[-1].iterdir() if p.suffix in (".pt", ".pth")] if versions else []
    return found[0] if len(found) == 1 else None


def fits(weight_bytes: int, memory_bytes: int | None, idle_bytes: int = IDLE_INSTANCE_BYTES) -> bool:
    return memory_bytes is None or idle_bytes + weight_bytes <= memory_bytes


def too_large(what: str, weight_bytes: int, spec: InstanceSpec, idle_bytes: int, hint: str) -> str:
    assert spec.memory_bytes is not None
    return (
        f"{what} needs {(idle_bytes + weight_bytes) / MiB:.1f} MiB (an idle instance {idle_bytes / MiB:.1f} MiB + "
        f"weights {weight_bytes / MiB:.1f} MiB); the instance type gives each instance "
        f"{spec.memory_bytes / MiB:.1f} MiB. {hint}"
    )


def util(stages: Sequence[tuple[float, float]]) -> float | None:
    """``Util = T_compute / (T_compute + T_idle)`` over ``(compute, idle)`` seconds of each stage; None when no
    time passed."""
    compute = sum(c for c, _ in stages)
    total = compute + sum(i for _, i in stages)
    return compute / total if total > 0 else None


def period_times(before: Mapping[str, float], now: Mapping[str, float]) -> tuple[float, float]:
    """A stage's ``(compute, idle)`` seconds between two of its stats (cumulative ``compute_s`` and ``wall_s``);
    a restarted stage (its counters went back) counts from zero."""
    if now["wall_s"] < before["wall_s"] or now["compute_s"] < before["compute_s"]:
        before = {"wall_s": 0.0, "compute_s": 0.0}
    compute = now["compute_s"] - before["compute_s"]
    wall = now["wall_s"] - before["wall_s"]
    return compute, max(0.0, wall - compute)


@dataclass(slots=True)
class PipelineHandle(InstanceHandle):
    """An instance that is N stage processes; ``url`` and ``pid`` are stage 0's."""

    stages: list[InstanceHandle] = field(default_factory=list)
    stage_bytes: list[int] = field(default_factory=list)
    stats_paths: list[str] = field(default_factory=list)

    def describe(self) -> dict[str, object]:
        """The instance's stages as DescribeEndpoint shows them (``ServekitPipelineStages`` of the variant)."""
        return {
            "InstanceId": self.spec.instance_id,
            "Stages": [
                {"Stage": k, "InstanceId": h.spec.instance_id, "WeightBytes": b, "Url": h.url}
                for k, (h, b) in enumerate(zip(self.stages, self.stage_bytes, strict=False))
            ],
        }


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/v2/health/ready", timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


class PipelineBackend:
    """A :class:`~servekit.backends.local.ReplicaBackend` that runs a pipeline-parallel instance as its stages and
    checks every ONNX model's envelope before it starts a process."""

    def __init__(
        self,
        inner: ReplicaBackend,
        stages_dir: Path,
        idle_bytes: int = IDLE_INSTANCE_BYTES,
        python: str = sys.executable,
        have_onnx: Callable[[], bool] = lambda: importlib.util.find_spec("onnx") is not None,
        have_torch: Callable[[], bool] = lambda: importlib.util.find_spec("torch") is not None,
        torch_idle_bytes: int = TORCH_IDLE_INSTANCE_BYTES,
        ready_timeout_s: float = 300.0,
        healthy: Callable[[str], bool] = _healthy,
    ) -> None:
        self.inner = inner
        self.stages_dir = stages_dir
        self.idle_bytes = idle_bytes
        self._python = python
        self._have_onnx = have_onnx
        self._have_torch = have_torch
        self.torch_idle_bytes = torch_idle_bytes
        self._ready_timeout_s = ready_timeout_s
        self._healthy = healthy
        self._splitting: dict[str, asyncio.Lock] = {}

    async def start(self, spec: InstanceSpec) -> InstanceHandle:
        degree = degree_of(spec.environment)
        tensor = degree_of(spec.environment, TENSOR_DEGREE_ENV)
        if spec.multi_model:
            if degree > 1 or tensor > 1:
                raise InstanceFailed("model parallelism applies to single-model endpoints, not MultiModel mode")
            return await self.inner.start(spec)
        if tensor > 1:
            if degree > 1:
                raise InstanceFailed(f"set {DEGREE_ENV} or {TENSOR_DEGREE_ENV}, not both")
            return await self._start_tensor_parallel(spec, tensor)
        model = onnx_model_file(spec.model_dir)
        if model is None:
            if degree > 1:
                raise InstanceFailed(f"{DEGREE_ENV}={degree} splits ONNX models: the model has no single .onnx file")
            return await self.inner.start(spec)
        weights = _dir_bytes(model.parent)
        if degree == 1:
            if not fits(weights, spec.memory_bytes, self.idle_bytes):
                hint = f"Set {DEGREE_ENV} in the model's Environment to split it into stages that fit."
                raise InstanceFailed(too_large("The model", weights, spec, self.idle_bytes, hint))
            return await self.inner.start(spec)
        return await self.start_stages(spec, model, degree)

    async def start_stages(self, spec: InstanceSpec, model: Path, degree: int) -> PipelineHandle:
        """``spec``'s instance as ``degree`` stages of the ONNX file ``model`` (a degree of 1 too: one stage process
        that publishes its compute time, the baseline benchmarks/pipeline_parallel_bench.py compares against)."""
        if not self._have_onnx():
            raise InstanceFailed(
                f"{DEGREE_ENV}={degree} needs the onnx package to split the model: pip install '{ONNX_EXTRA}'"
            )
        split = await self._split(model, degree, "servekit.parallel.split", "stages.json", str(degree))
        stage_bytes = [_dir_bytes(split / f"stage-{k}" / "1") for k in range(degree)]
        for k, b in enumerate(stage_bytes):
            if not fits(b, spec.memory_bytes, self.idle_bytes):
                hint = "Use a larger degree or instance type."
                raise InstanceFailed(too_large(f"Stage {k} of {degree}", b, spec, self.idle_bytes, hint))
        return await self._start_stages(spec, split, stage_bytes)

    async def _split(self, model: Path, degree: int, tool: str, marker: str, suffix: str) -> Path:
        """The split of ``model`` into ``degree`` parts by the module ``tool`` (run as a process), made once per
        content and ``suffix`` (the degree, and the kind of split)."""
        digest = await asyncio.to_thread(model_hash, model)
        key = f"{digest[:24]}-{suffix}"
        out = self.stages_dir / key
        async with self._splitting.setdefault(key, asyncio.Lock()):
            if (out / marker).is_file():
                return out
            tmp = self.stages_dir / f".{key}.{os.getpid()}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.parent.mkdir(parents=True, exist_ok=True)
            proc = await asyncio.create_subprocess_exec(
                self._python, "-m", tool, str(model), str(degree), str(tmp),
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            _, err = await proc.communicate()
            if proc.returncode != 0:
                shutil.rmtree(tmp, ignore_errors=True)
                lines = err.decode(errors="replace").strip().splitlines()
                raise InstanceFailed(f"splitting the model {degree} ways failed: {' '.join(lines[-3:])}")
            shutil.rmtree(out, ignore_errors=True)
            os.replace(tmp, out)
            return out

    async def _start_stages(self, spec: InstanceSpec, split: Path, stage_bytes: list[int]) -> PipelineHandle:
        degree = len(stage_bytes)
        stats = self._stats_paths(spec, degree, "stage")
        started: list[InstanceHandle] = []
        try:
            for k in range(1, degree):  # the later stages first: stage 0 is handed their URLs
                env = {**spec.environment, STATS_ENV: stats[k]}
                started.append(await self.inner.start(self._stage_spec(spec, split, k, env)))
            await asyncio.gather(*(self.ready(h) for h in started))
            env = {**spec.environment, STATS_ENV: stats[0], NEXT_ENV: ",".join(h.url for h in started)}
            # stage 0's requests wait on the later stages most of their time (its own compute is serialised by the
            # stage): more request threads than vCPUs let concurrent requests fill the pipeline
            threads = ("--num_inference_threads", str(STAGE0_THREADS_PER_STAGE * degree))
            first = await self.inner.start(
                replace(self._stage_spec(spec, split, 0, env), extra_args=(*spec.extra_args, *threads))
            )
            started.insert(0, first)
        except BaseException:
            await asyncio.gather(*(self.inner.stop(h) for h in started), return_exceptions=True)
            raise
        return PipelineHandle(
            spec,
            first.url,
            first.pid,
            log_path=first.log_path,
            stages=started,
            stage_bytes=stage_bytes,
            stats_paths=stats,
        )

    def _stats_paths(self, spec: InstanceSpec, degree: int, part: str) -> list[str]:
        """Where each stage (or rank) of ``spec``'s instance writes its compute and wall seconds (emptied now)."""
        stats_dir = self.stages_dir / "stats"
        stats_dir.mkdir(parents=True, exist_ok=True)
        paths = [str(stats_dir / f"{spec.instance_id}-{part}-{k}.json") for k in range(degree)]
        for path in paths:
            Path(path).unlink(missing_ok=True)
        return paths

    @staticmethod
    def _stage_spec(
        spec: InstanceSpec, split: Path, k: int, env: Mapping[str, str], part: str = "stage"
    ) -> InstanceSpec:
        return replace(
            spec, instance_id=f"{spec.instance_id}-{part}-{k}", model_dir=str(split / f"{part}-{k}"), environment=env
        )

    # ---- tensor parallelism (torch) ------------------------------------------------------------------------
    async def _start_tensor_parallel(self, spec: InstanceSpec, degree: int) -> PipelineHandle:
        """``spec``'s instance as ``degree`` ranks of a TorchScript MLP whose Linear weights are split across them
        (servekit.parallel.tensor), joined in a gloo process group; rank 0 takes the requests."""
        model = torch_model_file(spec.model_dir)
        if model is None:
            raise InstanceFailed(f"{TENSOR_DEGREE_ENV}={degree} splits TorchScript models: no single .pt file")
        if not self._have_torch():
            raise InstanceFailed(f"{TENSOR_DEGREE_ENV}={degree} needs torch: pip install '{TORCH_EXTRA}'")
        split = await self._split(model, degree, "servekit.parallel.tensor", "ranks.json", f"tp{degree}")
        rank_bytes = [_dir_bytes(split / f"rank-{r}" / "1") for r in range(degree)]
        for r, b in enumerate(rank_bytes):
            if not fits(b, spec.memory_bytes, self.torch_idle_bytes):
                hint = "Use a larger degree or instance type."
                raise InstanceFailed(too_large(f"Rank {r} of {degree}", b, spec, self.torch_idle_bytes, hint))
        base = {**spec.environment, TP_MASTER_ENV: f"127.0.0.1:{free_port()}", TP_WORLD_ENV: str(degree)}
        stats = self._stats_paths(spec, degree, "rank")
        started: list[InstanceHandle] = []
        try:
            for r in range(1, degree):  # the later ranks first: they answer their health check before joining
                env = {**base, TP_RANK_ENV: str(r), STATS_ENV: stats[r]}
                started.append(await self.inner.start(self._stage_spec(spec, split, r, env, "rank")))
            await asyncio.gather(*(self.ready(h) for h in started))
            env = {**base, TP_RANK_ENV: "0", STATS_ENV: stats[0]}
            first = await self.inner.start(self._stage_spec(spec, split, 0, env, "rank"))
            started.insert(0, first)
        except BaseException:
            await asyncio.gather(*(self.inner.stop(h) for h in started), return_exceptions=True)
            raise
        return PipelineHandle(
            spec,
            first.url,
            first.pid,
            log_path=first.log_path,
            stages=started,
            stage_bytes=rank_bytes,
            stats_paths=stats,
        )

    async def ready(self, handle: InstanceHandle) -> None:
        """Wait until a stage answers its health check (stage 0 must not take traffic before the later ones can)."""
        deadline = time.monotonic() + self._ready_timeout_s
        while not await asyncio.to_thread(self._healthy, handle.url):
            if not self.inner.alive(handle):
                tail = self.inner.log_tail(handle, 5)
                raise InstanceFailed(f"{handle.exit_reason} before it was healthy. Last log lines: {tail}")
            if time.monotonic() > deadline:
                raise InstanceFailed(f"stage {handle.spec.instance_id} did not become healthy in time")
            await asyncio.sleep(0.2)  # a health poll's period, as the fleet's

    async def stop(self, handle: InstanceHandle, grace_s: float = 10.0) -> None:
        if isinstance(handle, PipelineHandle):
            await asyncio.gather(*(self.inner.stop(h, grace_s) for h in handle.stages))
            handle.exit_reason = handle.exit_reason or f"instance {handle.spec.instance_id} was stopped"
        else:
            await self.inner.stop(handle, grace_s)

    def alive(self, handle: InstanceHandle) -> bool:
        if not isinstance(handle, PipelineHandle):
            return self.inner.alive(handle)
        for k, stage in enumerate(handle.stages):
            if not self.inner.alive(stage):
                handle.exit_reason = handle.exit_reason or f"stage {k}: {stage.exit_reason}"
                return False
        return True

    def log_tail(self, handle: InstanceHandle, lines: int = 20) -> str:
        if not isinstance(handle, PipelineHandle):
            return self.inner.log_tail(handle, lines)
        dead = [h for h in handle.stages if not self.inner.alive(h)] or handle.stages[:1]
        return "\n".join(self.inner.log_tail(h, lines) for h in dead)

    async def close(self) -> None:
        await self.inner.close()


def model_hash(path: Path) -> str:
    """The model file's SHA-256: with the degree, the key of its cached split."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _dir_bytes(path: Path) -> int:
    """A stage's weight bytes: its files (the graph and its external weights), not its handler code."""
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file())


def read_stats(path: str) -> dict[str, float] | None:
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(Path(path).read_text())
        return {"compute_s": float(data["compute_s"]), "wall_s": float(data["wall_s"])}
    return None


def stage_summary(handles: Sequence[InstanceHandle]) -> list[dict[str, object]] | None:
    """DescribeEndpoint's ``ServekitPipelineStages`` of a variant: each pipeline instance and its stages (None when
    it has none)."""
    found = [h.describe() for h in handles if isinstance(h, PipelineHandle)]
    return found or None


class PipelineMetrics(BackgroundLoop):
    """Each period: every stage's compute and idle seconds, and each variant's ``PipelineUtil``."""

    def __init__(
        self,
        controllers: Callable[[], Mapping[str, EndpointController]],
        store: MetricsStore,
        interval_s: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._controllers = controllers
        self.store = store
        self.interval_s = max(1.0, float(interval_s if interval_s is not None else store.resolution_s))
        self.clock = clock
        self._last: dict[str, dict[str, float]] = {}  # stats path -> its previous sample

    def sample(self) -> dict[tuple[str, str], float]:
        """Record one period's figures; returns each variant's Util, by (endpoint, variant)."""
        at = self.clock()
        utils: dict[tuple[str, str], float] = {}
        seen: set[str] = set()
        for endpoint, controller in list(self._controllers().items()):
            for fleet in list(controller.fleets.values()):
                times: list[tuple[float, float]] = []
                base = (("EndpointName", endpoint), ("VariantName", fleet.plan.name))
                for inst in list(fleet.instances):
                    if not isinstance(inst.handle, PipelineHandle):
                        continue
                    for k, path in enumerate(inst.handle.stats_paths):
                        now = read_stats(path)
                        seen.add(path)
                        if now is None:
                            continue
                        before = self._last.get(path)
                        self._last[path] = now
                        if before is None:
                            continue
                        compute, idle = period_times(before, now)
                        times.append((compute, idle))
                        dims = tuple(sorted((*base, ("Stage", str(k)))))
                        self.store.record(INSTANCE_NAMESPACE, "StageComputeTime", dims, compute, at)
                        self.store.record(INSTANCE_NAMESPACE, "StageIdleTime", dims, idle, at)
                value = util(times)
                if value is not None:
                    utils[(endpoint, fleet.plan.name)] = value
                    self.store.record(INSTANCE_NAMESPACE, "PipelineUtil", base, value, at)
        for gone in set(self._last) - seen:
            del self._last[gone]
        return utils

    async def run(self) -> None:
        while True:
            try:
                self.sample()
            except Exception:
                log.exception("sampling pipeline stages failed")
            await asyncio.sleep(until_next_bucket(self.clock(), self.interval_s, min(0.1, self.interval_s / 10)))
