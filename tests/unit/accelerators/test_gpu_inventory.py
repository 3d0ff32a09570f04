"""Which GPUs the machine has (NVML, else nvidia-smi, else none), which a process sees (CUDA_VISIBLE_DEVICES), and
which instance holds which (GpuPool): over servekit.testing's fake NVML and nvidia-smi text."""

from __future__ import annotations

import pytest

from servekit.accelerators.inventory import (
    NVIDIA_SMI_QUERY,
    Gpu,
    detect_gpus,
    gpus_from_nvidia_smi,
    gpus_from_nvml,
    parse_nvidia_smi,
    visible,
)
from servekit.accelerators.placement import GpuPool, GpuShortage, choose_gpus
from servekit.testing.fake_nvml import FakeGpu, FakeNvml

SMI = "0, Tesla T4, 15360, GPU-aaaa\n1, Tesla T4, 15360, GPU-bbbb\n"
TWO = (Gpu(0, "Tesla T4", 15360 * 2**20, "GPU-aaaa"), Gpu(1, "Tesla T4", 15360 * 2**20, "GPU-bbbb"))


def test_nvml_lists_the_cards() -> None:
    nvml = FakeNvml([FakeGpu("NVIDIA A10G", 24 * 2**30, uuid="GPU-x"), FakeGpu()])
    assert gpus_from_nvml(nvml) == (
        Gpu(0, "NVIDIA A10G", 24 * 2**30, "GPU-x"),
        Gpu(1, "Tesla T4", 16 * 2**30, "GPU-fake-1"),
    )


def test_nvidia_smi_is_asked_for_csv_and_parsed() -> None:
    asked: list[list[str]] = []

    def run(argv: object) -> str:
        asked.append(list(argv))  # type: ignore[call-overload]
        return SMI

    assert gpus_from_nvidia_smi(run) == TWO
    assert asked == [["nvidia-smi", *NVIDIA_SMI_QUERY]]
    assert gpus_from_nvidia_smi(lambda argv: None) is None  # no nvidia-smi, or no driver
    assert parse_nvidia_smi("No devices were found\n") == ()


def test_detection_prefers_nvml_then_nvidia_smi_then_none() -> None:
    nvml = FakeNvml([FakeGpu()])
    assert len(detect_gpus(lambda: nvml, lambda: TWO)) == 1
    assert detect_gpus(lambda: None, lambda: TWO) == TWO
    assert detect_gpus(lambda: None, lambda: None) == ()
    broken = FakeNvml([FakeGpu()])
    broken.nvmlDeviceGetCount = lambda: 2  # type: ignore[method-assign]  # a handle NVML then cannot give
    assert detect_gpus(lambda: broken, lambda: TWO) == TWO


@pytest.mark.parametrize(
    ("listed", "indices"),
    [(None, [0, 1]), ("", []), ("1", [1]), ("1,0", [1, 0]), ("GPU-bbbb", [1]), ("0,7,1", [0]), ("-1", [])],
)
def test_cuda_visible_devices_as_cuda_reads_it(listed: str | None, indices: list[int]) -> None:
    env = {} if listed is None else {"CUDA_VISIBLE_DEVICES": listed}
    assert [g.index for g in visible(TWO, env)] == indices


def test_each_instance_gets_its_own_gpus_and_a_shortage_names_the_counts() -> None:
    assert choose_gpus([0, 1, 2, 3], {1}, 2) == (0, 2)
    assert choose_gpus([0, 1], {0}, 2) is None
    detections = []
    pool = GpuPool(lambda: detections.append(1) or TWO)  # type: ignore[func-returns-value]
    assert pool.acquire("a", 1) == (0,)
    assert pool.acquire("b", 1) == (1,)
    with pytest.raises(GpuShortage, match=r"^needs 1 GPU, this machine has 2 \(0 free\)$"):
        pool.acquire("c", 1)
    pool.release("a")
    assert pool.acquire("c", 1) == (0,)
    assert pool.held() == {"b": (1,), "c": (0,)}
    assert detections == [1]  # detected once
    with pytest.raises(GpuShortage, match=r"^needs 4 GPUs, this machine has 0$"):
        GpuPool(lambda: ()).acquire("x", 4)
