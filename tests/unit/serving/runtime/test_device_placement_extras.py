"""Device placement through torch's and TensorFlow's own APIs on this machine's CPU builds (``make test-extras``):
``torch.cuda.is_available()`` and ``tf.config.list_physical_devices("GPU")`` say no, so auto serves on the CPU with
the reason in its log line and an explicit cuda is refused at load."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from servekit.accelerators.inventory import Gpu
from servekit.config.models import DeviceRequest, RuntimeOptions
from servekit.serving.runtime import devices
from servekit.serving.runtime.devices import DeviceUnavailable
from servekit.serving.runtime.registry import RuntimeRegistry

pytestmark = pytest.mark.extras
T4 = Gpu(0, "Tesla T4", 16 * 2**30)


def test_torch_serves_on_the_cpu_when_cuda_is_not_available(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    torch = pytest.importorskip("torch")
    from tests.extras_models import scripted_torch_model

    assert not torch.cuda.is_available()
    scripted_torch_model(tmp_path)
    torch.save((torch.zeros(2, 4), torch.ones(2)), tmp_path / "example_inputs.pt")
    caplog.set_level(logging.INFO, "servekit.serving.runtime.devices")
    monkeypatch.setattr(devices, "machine_gpus", lambda: ())
    s = RuntimeRegistry().load(tmp_path)
    assert getattr(s, "device", None) == "cpu"
    assert "(torch) runs on the CPU (no GPU on this machine)" in caplog.text
    out = s.predict("serving_default", {"features": np.zeros((3, 4), np.float32), "scale": np.ones(3, np.float32)})
    assert out["output_0"].shape == (3, 3)
    with pytest.raises(DeviceUnavailable, match="--device cuda: no GPU on this machine"):
        RuntimeRegistry().load(tmp_path, options=RuntimeOptions(device=DeviceRequest("cuda")))
    monkeypatch.setattr(devices, "machine_gpus", lambda: (T4,))  # a card this CPU build of torch cannot use
    caplog.clear()
    assert getattr(RuntimeRegistry().load(tmp_path), "device", None) == "cpu"
    assert "torch here cannot use CUDA (torch.cuda.is_available() is False)" in caplog.text


def test_tensorflow_serves_on_the_cpu_when_it_lists_no_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    tf = pytest.importorskip("tensorflow")
    from tests.extras_models import tf2_saved_model

    assert tf.config.list_physical_devices("GPU") == []
    tf2_saved_model(tmp_path / "1")
    caplog.set_level(logging.INFO, "servekit.serving.runtime.devices")
    monkeypatch.setattr(devices, "machine_gpus", lambda: ())
    s = RuntimeRegistry().load(tmp_path / "1", options=RuntimeOptions(gpu_memory_fraction=0.4))
    assert getattr(s, "device", None) == "cpu"
    assert "(TensorFlow) runs on the CPU (no GPU on this machine)" in caplog.text
    out = s.predict("serving_default", {"x": np.ones((2, 3), np.float32)})
    assert out["y"].tolist() == [[6.0, 9.0], [6.0, 9.0]]
    with pytest.raises(DeviceUnavailable, match="--device cuda:0: no GPU on this machine"):
        RuntimeRegistry().load(tmp_path / "1", options=RuntimeOptions(device=DeviceRequest("cuda", 0)))
