"""A model on a GPU gets TF Serving's GPU batching guidance as its defaults (max_batch_size 256, allowed_batch_sizes
padding, one batch thread per device) when its batching parameters are servekit's defaults; a model on the CPU,
or parameters from a file, keep what they were given. Through the scheduler that builds each model's queue."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from servekit._utils.threads import ModelThreads
from servekit.config.models import BatchingConfig
from servekit.serving.batching.scheduler import BatchScheduler
from servekit.types import Signature, TensorSpec

SIG = Signature("serving_default", (TensorSpec("x", "FP32", (-1, 4)),), (TensorSpec("y", "FP32", (-1,)),))


class Placed:
    """A servable that says where it runs, as the built-in runtimes' do."""

    platform = "test"
    signatures = {"serving_default": SIG}

    def __init__(self, device: str) -> None:
        self.device = device

    def predict(self, signature: str, inputs: Any) -> dict[str, Any]:
        return {"y": inputs["x"].sum(axis=1)}

    def unload(self) -> None:
        pass


@pytest.fixture
def threads() -> Iterator[ModelThreads]:
    pool = ModelThreads(1, name="model")
    yield pool
    pool.shutdown()


@pytest.mark.parametrize(
    ("given", "device", "expected"),
    [
        (BatchingConfig(), "cuda:0", (256, (8, 16, 32, 64, 128, 256), 1)),
        (BatchingConfig(), "cpu", (64, (), 2)),
        (BatchingConfig(max_batch_size=32, num_batch_threads=4), "cuda:1", (32, (), 4)),
    ],
)
def test_the_queue_gets_gpu_defaults_only_for_a_gpu_model_with_default_parameters(
    threads: ModelThreads, given: BatchingConfig, device: str, expected: tuple[int, tuple[int, ...], int]
) -> None:
    scheduler = BatchScheduler(threads, lambda model: given)
    queue = scheduler.queue_for("m", 1, Placed(device), SIG)
    assert queue is not None
    assert (queue.cfg.max_batch_size, queue.cfg.allowed_batch_sizes, queue.cfg.num_batch_threads) == expected
