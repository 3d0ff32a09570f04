"""Older XGBoost's binary models (and SageMaker's pickled boosters holding one), converted to XGBoost's JSON model
at load (servekit.serving.runtime.xgboost_legacy).

The models in fixtures/xgboost_legacy/ were written by XGBoost 2.1.4, the last release that writes the binary
format, with ``fixtures/xgboost_legacy/make_models.py`` (its docstring has the exact commands); ``expected.json``
holds the probe rows and what XGBoost 2.1.4 predicted for each model, loaded from those same bytes. Here each model
is converted, loaded in the installed XGBoost (3.x, which no longer reads the binary format) and must predict what
2.1 did, to float32 precision.
"""

from __future__ import annotations

import json
import logging
import pickle
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.testing import assert_allclose

from servekit.errors import ConfigError
from servekit.serving.runtime import xgboost_legacy
from servekit.serving.runtime.registry import RuntimeRegistry

xgb = pytest.importorskip("xgboost")

FIXTURES = Path(__file__).parent / "fixtures" / "xgboost_legacy"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())
ROWS = np.array([[np.nan if v is None else v for v in row] for row in EXPECTED["rows"]], dtype=np.float64)
MODELS = sorted(EXPECTED["models"])


def _raw(name: str) -> bytes:
    return (FIXTURES / str(EXPECTED["models"][name]["file"])).read_bytes()


def _predict(doc: bytes) -> Any:
    booster = xgb.Booster(model_file=bytearray(doc))
    return booster.predict(xgb.DMatrix(ROWS))


def _sagemaker_pickle(handle: bytes, other_global: bytes = b"") -> bytes:
    """A pickle shaped as SageMaker's 2018 XGBoost containers wrote ``xgboost-model`` (Python 2, protocol 0:
    ``copy_reg._reconstructor`` of ``xgboost.core.Booster``, a state dict with the binary model as a bytearray built
    from latin-1 text), as the AWS SDK's integration-test model holds it."""
    # what protocol 0's UNICODE opcode carries: latin-1, with backslash and newline escaped as Python 2 did
    text = handle.decode("latin-1").replace("\\", "\\u005c").replace("\n", "\\u000a").encode("raw_unicode_escape")
    return (
        b"ccopy_reg\n_reconstructor\np0\n(cxgboost.core\nBooster\np1\nc__builtin__\nobject\np2\nNtp3\nRp4\n(dp5\n"
        b"S'best_iteration'\np6\nI5\nsS'handle'\np7\nc__builtin__\nbytearray\np8\n(V" + text + b"\np9\n"
        b"S'latin-1'\np10\ntp11\nRp12\nsS'feature_types'\np13\nNsS'feature_names'\np14\n(lp15\n"
        + b"".join(b"S'f%d'\na" % i for i in range(5))
        + other_global
        + b"sS'best_ntree_limit'\np23\nI6\nsb."
    )


@pytest.mark.parametrize("name", MODELS)
def test_each_model_predicts_what_xgboost_2_1_did(name: str) -> None:
    raw = _raw(name)
    assert raw.startswith(b"binf") and xgboost_legacy.looks_legacy(raw[:512])
    expected = np.asarray(EXPECTED["models"][name]["predictions"], dtype=np.float32)
    assert_allclose(_predict(xgboost_legacy.convert(raw)), expected, rtol=1e-6, atol=1e-7)
    # older releases wrote the same layout without the "binf" marker
    assert_allclose(_predict(xgboost_legacy.convert(raw[4:])), expected, rtol=1e-6, atol=1e-7)


def test_the_converted_document_keeps_what_the_binary_model_says() -> None:
    doc = xgboost_legacy.legacy_to_json(_raw("multi3_depth4"))
    learner = doc["learner"]
    assert learner["objective"]["name"] == "multi:softprob"
    assert learner["learner_model_param"]["num_class"] == "3"
    assert learner["attributes"] == {"note": "servekit test model multi3_depth4"}
    model = learner["gradient_booster"]["model"]
    assert model["tree_info"] == [0, 1, 2, 0, 1, 2] and model["iteration_indptr"] == [0, 3, 6]
    pruned = xgboost_legacy.legacy_to_json(_raw("pruned_depth5"))["learner"]["gradient_booster"]["model"]
    assert sum(int(t["tree_param"]["num_deleted"]) for t in pruned["trees"]) > 0  # deleted nodes carried over


def _pre_1_0(raw: bytes, margin: float) -> bytes:
    """The model as XGBoost before 1.0 wrote it: version 0 in the header, no "binf", no attributes (so no saved
    objective configuration) and the base score as a margin."""
    header = bytearray(raw[4 : 4 + 136])
    struct.pack_into("<fIiiiIIIi", header, 0, margin, 5, 0, 0, 0, 0, 0, 0, 0)  # then reserved zeros
    return bytes(header) + raw[4 + 136 :]  # the attributes left at the end are not read (contain_extra_attrs 0)


@pytest.mark.parametrize(
    ("name", "to_margin"),
    [("binary_depth2", lambda p: np.log(p / (1 - p))), ("poisson_depth3", np.log), ("reg_depth3", lambda v: v)],
)
def test_a_model_from_before_1_0_saved_its_base_score_as_a_margin(name: str, to_margin: Any) -> None:
    """XGBoost 2.1 transforms such a base score back as it does a prediction; so does the converter (checked
    against XGBoost 2.1 for these three when this was written: the same predictions, within one float32 ulp)."""
    base = float(xgboost_legacy.legacy_to_json(_raw(name))["learner"]["learner_model_param"]["base_score"])
    old = _pre_1_0(_raw(name), float(to_margin(np.float32(base))))
    doc = xgboost_legacy.legacy_to_json(old)
    assert doc["learner"]["attributes"] == {} and doc["learner"]["learner_model_param"]["boost_from_average"] == "0"
    expected = np.asarray(EXPECTED["models"][name]["predictions"], dtype=np.float32)
    assert_allclose(_predict(json.dumps(doc).encode()), expected, rtol=1e-6, atol=1e-7)


def test_sagemakers_pickled_booster_is_read_with_its_binary_model(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = _raw("binary_depth2")[4:]  # 2018's pickles hold the model without "binf"
    data = _sagemaker_pickle(raw)
    assert xgboost_legacy.looks_pickled(data[:512])
    handle, names = xgboost_legacy.unpickle_booster(data)
    assert handle == raw and names == [f"f{i}" for i in range(5)]
    doc = json.loads(xgboost_legacy.convert(data))
    assert doc["learner"]["feature_names"] == []  # old XGBoost's default names are not kept
    expected = np.asarray(EXPECTED["models"]["binary_depth2"]["predictions"], dtype=np.float32)
    assert_allclose(_predict(xgboost_legacy.convert(data)), expected, rtol=1e-6, atol=1e-7)
    # a pickle of a newer Python (protocol 2+) of the same state
    stand_in = _PickledBooster()
    stand_in.__dict__.update({"handle": bytearray(raw), "feature_names": None})
    monkeypatch.setattr(xgb.core, "Booster", _PickledBooster)  # so that pickle writes it as xgboost.core.Booster
    for protocol in (2, 3, 4):
        newer = pickle.dumps(stand_in, protocol=protocol)
        assert xgboost_legacy.looks_pickled(newer[:512])
        assert_allclose(_predict(xgboost_legacy.convert(newer)), expected, rtol=1e-6, atol=1e-7)


class _PickledBooster:
    """Pickles as ``xgboost.core.Booster`` with its ``__dict__`` as the state, as old XGBoost's Booster did."""

    __module__ = "xgboost.core"
    __qualname__ = "Booster"


@pytest.mark.parametrize(
    "other",
    [
        b"cos\nsystem\n(S'true'\ntR",  # os.system('true')
        b"c__builtin__\neval\n(S'1'\ntR",
        b"cxgboost.core\nDMatrix\n)R",
        b"c__builtin__\nbytearray\n(I100000000000\ntR",  # bytearray(10**11): no gigabytes allocated
    ],
)
def test_a_pickle_naming_anything_else_is_refused(other: bytes) -> None:
    data = _sagemaker_pickle(_raw("reg_depth3")[4:], other_global=other + b"a")
    with pytest.raises(ValueError, match="not a readable pickled booster"):
        xgboost_legacy.convert(data)


def _corrupt(raw: bytes, offset: int, fmt: str, value: int) -> bytes:
    out = bytearray(raw)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


# Offsets in reg_depth3.bin: "binf", header (136), objective name (8 + 16), booster name (8 + 6), gbtree param (160),
# then the first tree's TreeParam.
_OBJECTIVE = 4 + 136
_GBTREE = _OBJECTIVE + 8 + len(b"reg:squarederror") + 8 + len(b"gbtree")
_TREE = _GBTREE + 160


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        (lambda raw: raw[:100], "truncated"),
        (lambda raw: raw[: len(raw) // 2], "truncated|exceeds|does not fit"),
        (lambda raw: raw[:-3], "truncated|exceeds"),
        (lambda raw: _corrupt(raw, _OBJECTIVE, "<Q", 1 << 20), "objective name is 1048576 bytes"),
        (lambda raw: _corrupt(raw, _GBTREE, "<i", 2_000_000_000), "num_trees 2000000000 does not fit"),
        (lambda raw: _corrupt(raw, _GBTREE, "<i", -1), "num_trees -1"),
        (lambda raw: _corrupt(raw, _TREE + 4, "<i", 1_000_000_000), "num_nodes 1000000000 does not fit"),
        (lambda raw: _corrupt(raw, _TREE + 4, "<i", 0), "num_nodes 0"),
        (lambda raw: _corrupt(raw, _TREE + 8, "<i", 3), "num_deleted 3 does not match"),
        (lambda raw: _corrupt(raw, _TREE + 148 + 4, "<i", 0), "node 0 has children 0"),  # root's left child
        (lambda raw: _corrupt(raw, _TREE + 148 + 8, "<i", 7), "not adjacent"),  # root's right child
        (lambda raw: _corrupt(raw, _TREE + 148 + 12, "<I", 1000), "splits on feature 1000 of 5"),
        (lambda raw: _corrupt(raw, 4 + 8, "<i", -2), "num_class -2"),
        (lambda raw: raw.replace(b"gbtree", b"gbxxxx", 1), "booster 'gbxxxx'"),
        (lambda raw: raw.replace(b"reg:squarederror", b"reg:squaredevils", 1), "unknown objective 'reg:squaredevils'"),
    ],
)
def test_truncated_corrupted_and_oversized_models_are_refused(damage: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        xgboost_legacy.legacy_to_json(damage(_raw("reg_depth3")))


def test_every_truncation_is_refused_with_value_error() -> None:
    raw = _raw("dart_depth2")
    for end in range(0, len(raw) - 1, 7):
        with pytest.raises(ValueError):
            xgboost_legacy.convert(raw[:end])


def test_the_runtime_loads_an_xgboost_model_in_the_legacy_format(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    version = tmp_path / "old" / "1"
    version.mkdir(parents=True)
    (version / "xgboost-model").write_bytes(_sagemaker_pickle(_raw("binary_depth2")[4:]))
    registry = RuntimeRegistry()
    assert registry.choose(version).name == "xgboost"
    with caplog.at_level(logging.INFO, logger="servekit.serving.runtime.xgboost_native"):
        servable = registry.load(version)
    assert "converted an older XGBoost's binary model" in caplog.text
    assert servable is not None
    binary = tmp_path / "bin" / "1"
    binary.mkdir(parents=True)
    (binary / "model.bin").write_bytes(_raw("multi3_depth4"))
    assert registry.choose(binary).name == "xgboost"
    assert registry.load(binary) is not None
    # a damaged one keeps the refusal that says what it is
    broken = tmp_path / "broken" / "1"
    broken.mkdir(parents=True)
    (broken / "xgboost-model").write_bytes(_raw("reg_depth3")[:2000])
    with pytest.raises(ConfigError, match="older XGBoost's binary model or a pickled booster, but servekit cannot"):
        registry.load(broken)
