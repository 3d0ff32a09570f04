"""Runtimes whose framework is an optional extra: chosen from the files without importing the framework, and a
clear message naming the extra when it is not installed (simulated by hiding the module)."""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

import pytest

from servekit.errors import ConfigError
from servekit.serving.runtime.registry import RuntimeRegistry


def _torchscript_like(path: Path) -> None:
    with zipfile.ZipFile(path / "model.pt", "w") as zf:  # the layout torch.jit.save writes
        zf.writestr("model/code/__torch__.py", "")
        zf.writestr("model/constants.pkl", b"")


@pytest.mark.parametrize(
    ("module", "make", "runtime", "extra"),
    [
        ("tensorflow", lambda p: (p / "saved_model.pb").write_bytes(b""), "tensorflow", "servekit[tensorflow]"),
        ("torch", _torchscript_like, "torch", "servekit[torch]"),
        ("xgboost", lambda p: (p / "model.json").write_text('{"learner": {}}'), "xgboost", "servekit[xgboost]"),
    ],
)
def test_missing_framework_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, make: object, runtime: str, extra: str
) -> None:
    make(tmp_path)  # type: ignore[operator]
    assert RuntimeRegistry().choose(tmp_path).name == runtime
    monkeypatch.setitem(sys.modules, module, None)  # import now raises ImportError
    with pytest.raises(ConfigError, match=re.escape(f"not installed: pip install '{extra}'")):
        RuntimeRegistry().load(tmp_path)


def test_a_torch_save_file_alone_is_no_model(tmp_path: Path) -> None:
    with zipfile.ZipFile(tmp_path / "weights.pt", "w") as zf:  # torch.save of a state dict: no code/
        zf.writestr("weights/data.pkl", b"")
    with pytest.raises(ConfigError, match="no runtime recognises the files"):
        RuntimeRegistry().choose(tmp_path)
