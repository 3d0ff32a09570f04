"""The PyTorch runtime (``make test-extras``): a scripted ``torch.nn.Module`` with its signature from example
inputs or from servekit.toml, and a ``torch.export`` ExportedProgram; outputs equal to the module's own."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_allclose

torch = pytest.importorskip("torch")

from tests.extras_models import scripted_torch_model  # noqa: E402

from servekit.config.models import RuntimeOptions  # noqa: E402
from servekit.errors import ConfigError  # noqa: E402
from servekit.serving.runtime.base import concurrency_of  # noqa: E402
from servekit.serving.runtime.registry import RuntimeRegistry  # noqa: E402

pytestmark = pytest.mark.extras

FEATURES = np.random.default_rng(3).normal(size=(5, 4)).astype(np.float32)
SCALE = np.linspace(0.5, 2.0, 5, dtype=np.float32)


def _reference(module: object, features: np.ndarray, scale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with torch.inference_mode():
        probs, total = module(torch.from_numpy(features), torch.from_numpy(scale))  # type: ignore[operator]
    return probs.numpy(), total.numpy()


def test_scripted_module_with_example_inputs(tmp_path: Path) -> None:
    module = scripted_torch_model(tmp_path)
    torch.save((torch.from_numpy(FEATURES[:2]), torch.from_numpy(SCALE[:2])), tmp_path / "example_inputs.pt")
    assert RuntimeRegistry().choose(tmp_path).name == "torch"  # example_inputs.pt is no TorchScript archive
    s = RuntimeRegistry().load(tmp_path, options=RuntimeOptions(intra_op_threads=1))
    assert s.platform == "pytorch_libtorch"
    sig = s.signatures["serving_default"]
    # names from forward's arguments, batch dimension variable, outputs named by position
    assert [(t.name, t.datatype, t.shape) for t in sig.inputs] == [
        ("features", "FP32", (-1, 4)),
        ("scale", "FP32", (-1,)),
    ]
    assert [(t.name, t.datatype, t.shape) for t in sig.outputs] == [
        ("output_0", "FP32", (-1, 3)),
        ("output_1", "FP32", (-1,)),
    ]
    got = s.predict("serving_default", {"features": FEATURES, "scale": SCALE})
    probs, total = _reference(module, FEATURES, SCALE)
    assert_allclose(got["output_0"], probs, rtol=1e-6)
    assert_allclose(got["output_1"], total, rtol=1e-6)
    assert concurrency_of(s).releases_gil and concurrency_of(s).threads == torch.get_num_threads() == 1


def test_scripted_module_with_a_declared_signature(tmp_path: Path) -> None:
    module = scripted_torch_model(tmp_path)
    (tmp_path / "servekit.toml").write_text(
        """
[[signatures]]
name = "serving_default"
inputs = [{name = "x", datatype = "FP32", shape = [-1, 4]}, {name = "s", datatype = "FP32", shape = [-1]}]
outputs = [
  {name = "probabilities", datatype = "FP32", shape = [-1, 3]},
  {name = "total", datatype = "FP32", shape = [-1]},
]
"""
    )
    s = RuntimeRegistry().load(tmp_path)
    got = s.predict("serving_default", {"x": FEATURES, "s": SCALE})
    probs, total = _reference(module, FEATURES, SCALE)
    assert_allclose(got["probabilities"], probs, rtol=1e-6)
    assert_allclose(got["total"], total, rtol=1e-6)


def test_scripted_module_without_a_signature_is_refused(tmp_path: Path) -> None:
    scripted_torch_model(tmp_path)
    with pytest.raises(ConfigError, match=r"declare a signature in servekit\.toml or save example inputs"):
        RuntimeRegistry().load(tmp_path)


def test_exported_program(tmp_path: Path) -> None:
    module = scripted_torch_model(tmp_path / "scripted")
    batch = torch.export.Dim("batch")
    program = torch.export.export(
        module,
        (torch.from_numpy(FEATURES[:2]), torch.from_numpy(SCALE[:2])),
        dynamic_shapes=({0: batch}, {0: batch}),
    )
    version = tmp_path / "1"
    version.mkdir()
    torch.export.save(program, str(version / "model.pt2"))
    s = RuntimeRegistry().load(version)
    assert s.platform == "pytorch_export"
    sig = s.signatures["serving_default"]
    assert [(t.name, t.shape) for t in sig.inputs] == [("features", (-1, 4)), ("scale", (-1,))]
    got = s.predict("serving_default", {"features": FEATURES, "scale": SCALE})
    probs, total = _reference(module, FEATURES, SCALE)
    assert_allclose(got["output_0"], probs, rtol=1e-5)
    assert_allclose(got["output_1"], total, rtol=1e-5)
