"""servekit recommend on a GPU instance type: its instance asks for the type's GPUs like an endpoint's does, and on
a machine without them the measurement fails at once with the counts (no process is started)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from servekit.accelerators.placement import GpuPool
from servekit.backends.local import InstanceSpec, LocalProcessBackend
from servekit.tools.recommend.measure import MeasureError, start_instance


def test_a_gpu_type_without_gpus_is_a_measure_error(tmp_path: Path) -> None:
    backend = LocalProcessBackend(tmp_path, gpus=GpuPool(lambda: ()))
    spec = InstanceSpec("recommend-ml.g4dn.xlarge-0", "m", "/m", vcpus=4, gpus=1)
    with pytest.raises(MeasureError, match=r"^instance recommend-ml.g4dn.xlarge-0 needs 1 GPU, this machine has 0$"):
        asyncio.run(start_instance(backend, spec))
    assert list(tmp_path.iterdir()) == []
