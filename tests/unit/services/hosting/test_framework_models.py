"""SageMaker framework models in hosting: a framework image (matched on its repository name) with SAGEMAKER_PROGRAM
and SAGEMAKER_SUBMIT_DIRECTORY is served from a composed version folder (the model's files, the unpacked source
directory as code/, a servekit.toml naming the entry point); CreateModel refuses what cannot work with a clear
ValidationException; any other container is served as it is."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import sys
import tarfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xgboost as xgb

from servekit.aws.errors import ApiError
from servekit.backends.local import InstanceHandle, InstanceSpec
from servekit.gateway.service import RoutingTable
from servekit.services.database import StateDB
from servekit.services.hosting.api import HostingService
from servekit.services.hosting.artifacts import ArtifactResolver
from servekit.services.hosting.envelopes import Envelope
from servekit.services.hosting.framework import (
    EntryPoint,
    FrameworkError,
    FrameworkModels,
    check_script,
    entry_point,
    image_repository,
    is_framework_image,
)
from servekit.services.hosting.instance_types import Machine
from servekit.services.hosting.orchestrator import Orchestrator
from servekit.services.hosting.store_rows import ContainerSpec
from servekit.serving.runtime.handler import HandlerServable
from servekit.serving.runtime.registry import RuntimeRegistry

SKLEARN = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"
TRAIN = b"def model_fn(model_dir):\n    return model_dir\n\nif __name__ == '__main__':\n    raise SystemExit(1)\n"


def tar_gz(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def container(submit: str = "", program: str = "train.py", image: str = SKLEARN, **extra: str) -> ContainerSpec:
    env = {k: v for k, v in {"SAGEMAKER_PROGRAM": program, "SAGEMAKER_SUBMIT_DIRECTORY": submit}.items() if v}
    return ContainerSpec(image=image, model_data_url="unused", environment={**env, **extra})


@pytest.mark.parametrize(
    ("image", "repository", "framework"),
    [
        (SKLEARN, "sagemaker-scikit-learn", True),
        ("246618743249.dkr.ecr.us-west-2.amazonaws.com/sagemaker-xgboost:1.7-1", "sagemaker-xgboost", True),
        ("763104351884.dkr.ecr.eu-west-1.amazonaws.com/pytorch-inference:2.1-cpu-py310", "pytorch-inference", True),
        ("763104351884.dkr.ecr.us-east-1.amazonaws.com/tensorflow-inference@sha256:abc", "tensorflow-inference", True),
        ("registry.local:5000/team/sagemaker-scikit-learn:1.2-1", "sagemaker-scikit-learn", True),
        ("servekit", "servekit", False),
        ("123456789012.dkr.ecr.us-east-1.amazonaws.com/my-own-image:latest", "my-own-image", False),
        ("", "", False),
    ],
)
def test_framework_images_are_matched_on_the_repository_name(image: str, repository: str, framework: bool) -> None:
    assert image_repository(image) == repository
    assert is_framework_image(image) is framework


def test_the_entry_point_of_a_container() -> None:
    assert entry_point(container("s3://b/job/source/sourcedir.tar.gz")) == EntryPoint(
        "train.py", "s3://b/job/source/sourcedir.tar.gz"
    )
    # the SDK's repacked model: the code is the model's own code/ folder
    assert entry_point(container("/opt/ml/model/code", "inference.py")) == EntryPoint("inference.py", "")
    assert entry_point(container("", "inference.py")) == EntryPoint("inference.py", "")
    # not a framework model: served as it is, whatever its environment says
    assert entry_point(container("s3://b/src.tar.gz", image="servekit")) is None
    assert entry_point(container("", "")) is None
    multi = ContainerSpec(SKLEARN, "s3://b/models/", {"SAGEMAKER_PROGRAM": "train.py"}, mode="MultiModel")
    assert entry_point(multi) is None
    with pytest.raises(FrameworkError, match="SAGEMAKER_SUBMIT_DIRECTORY is set but SAGEMAKER_PROGRAM is not"):
        entry_point(container("s3://b/src.tar.gz", ""))
    for bad in ("../train.py", "/opt/ml/code/train.py"):
        with pytest.raises(FrameworkError, match="must name a script inside SAGEMAKER_SUBMIT_DIRECTORY"):
            entry_point(container("s3://b/src.tar.gz", bad))


@pytest.mark.parametrize(
    "source",
    [
        "def model_fn(model_dir):\n    pass\n",
        "async def model_fn(model_dir):\n    pass\n",
        "from helpers import load as model_fn\n",
        "model_fn = lambda d: d\n",
        "try:\n    import x\nexcept ImportError:\n    def model_fn(d):\n        pass\n",
        "from helpers import *\n",
    ],
)
def test_a_script_that_binds_model_fn_passes(tmp_path: Path, source: str) -> None:
    (tmp_path / "train.py").write_text(source)
    check_script(tmp_path / "train.py", "train.py")


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("def predict_fn(data, model):\n    pass\n", "defines no model_fn"),
        ("def main():\n    def model_fn(d):\n        pass\n", "defines no model_fn"),
        ("def model_fn(:\n", r"cannot be parsed: .*\(line 1\)"),
    ],
)
def test_a_script_without_model_fn_is_refused(tmp_path: Path, source: str, reason: str) -> None:
    (tmp_path / "train.py").write_text(source)
    with pytest.raises(FrameworkError, match=reason):
        check_script(tmp_path / "train.py", "train.py")


@pytest.fixture
def resolver(tmp_path: Path) -> ArtifactResolver:
    return ArtifactResolver(tmp_path / "cache")


def models(resolver: ArtifactResolver, cache: Path | None) -> FrameworkModels:
    return FrameworkModels(lambda url: str(resolver.resolve(url).base_path), cache)


def test_the_version_folder_is_composed_once(
    tmp_path: Path, resolver: ArtifactResolver, caplog: pytest.LogCaptureFixture
) -> None:
    model = tar_gz(tmp_path / "model.tar.gz", {"model.joblib": b"weights", "code/inference.py": b"old"})
    src = tar_gz(
        tmp_path / "sourcedir.tar.gz",
        {"train.py": TRAIN, "serve.py": TRAIN, "helpers.py": b"X = 1\n", "requirements.txt": b"pandas\n"},
    )
    fm = models(resolver, tmp_path / "framework")
    spec = container(f"file://{src}")
    fm.check(spec)
    base = str(resolver.resolve(str(model)).base_path)
    with caplog.at_level(logging.WARNING, logger="servekit.services.hosting.framework"):
        served = Path(fm.model_dir(spec, base, "m"))
    assert "requirements.txt, which was not installed" in caplog.text
    assert served.parent == tmp_path / "framework"
    version = served / "1"
    assert sorted(p.name for p in version.iterdir()) == ["code", "model.joblib", "servekit.toml"]
    assert (version / "model.joblib").read_bytes() == b"weights"
    assert (version / "code" / "train.py").read_bytes() == TRAIN  # the source directory replaces the model's code/
    assert (version / "code" / "helpers.py").is_file()
    assert tomllib.loads((version / "servekit.toml").read_text()) == {"runtime": "python", "entry_point": "train.py"}
    assert fm.model_dir(spec, base, "m") == str(served)  # cached
    other = fm.model_dir(container(f"file://{src}", "serve.py"), base, "m")  # another entry point: another folder
    assert other != str(served)


def test_the_program_may_omit_py_and_a_source_folder_works(tmp_path: Path, resolver: ArtifactResolver) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "serve.py").write_bytes(TRAIN)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "weights.bin").write_bytes(b"w")
    fm = models(resolver, tmp_path / "framework")
    spec = container(str(tmp_path / "src"), "serve")
    fm.check(spec)
    served = Path(fm.model_dir(spec, str(resolver.resolve(str(tmp_path / "model")).base_path)))
    assert tomllib.loads((served / "1" / "servekit.toml").read_text())["entry_point"] == "serve.py"
    assert (served / "1" / "weights.bin").read_bytes() == b"w"


def test_a_repacked_models_own_code_folder(tmp_path: Path, resolver: ArtifactResolver) -> None:
    model = tar_gz(tmp_path / "model.tar.gz", {"model.pth": b"w", "code/inference.py": TRAIN})
    fm = models(resolver, tmp_path / "framework")
    spec = container("/opt/ml/model/code", "inference.py")
    fm.check(spec)  # nothing to check before the model is fetched
    served = Path(fm.model_dir(spec, str(resolver.resolve(str(model)).base_path)))
    assert (served / "1" / "code" / "inference.py").read_bytes() == TRAIN
    broken = tar_gz(tmp_path / "broken.tar.gz", {"model.pth": b"w", "code/other.py": b""})
    with pytest.raises(FrameworkError, match=r"SAGEMAKER_PROGRAM inference.py is not in .*/opt/ml/model/code"):
        fm.model_dir(spec, str(resolver.resolve(str(broken)).base_path))


def test_what_cannot_be_served_is_refused_with_its_reason(tmp_path: Path, resolver: ArtifactResolver) -> None:
    fm = models(resolver, tmp_path / "framework")
    missing = tmp_path / "nope.tar.gz"
    with pytest.raises(FrameworkError) as info:
        fm.check(container(f"file://{missing}"))
    assert (
        info.value.message == f"SAGEMAKER_SUBMIT_DIRECTORY file://{missing} cannot be read: no such file or directory"
    )
    src = tar_gz(tmp_path / "src.tar.gz", {"other.py": b"", "util.py": b""})
    with pytest.raises(
        FrameworkError, match=r"SAGEMAKER_PROGRAM train\.py is not in .* \(it holds: other\.py, util\.py\)"
    ):
        fm.check(container(str(src)))
    no_model_fn = tar_gz(tmp_path / "nomodel.tar.gz", {"train.py": b"import sys\n"})
    with pytest.raises(FrameworkError, match=r"SAGEMAKER_PROGRAM train\.py defines no model_fn"):
        fm.check(container(str(no_model_fn)))
    model = tar_gz(tmp_path / "model.tar.gz", {"model.joblib": b"w"})
    good = tar_gz(tmp_path / "good.tar.gz", {"train.py": TRAIN})
    with pytest.raises(FrameworkError, match="no folder for framework models"):
        models(resolver, None).model_dir(container(str(good)), str(resolver.resolve(str(model)).base_path))
    # any other container: the model base as it is, nothing read
    assert fm.model_dir(container(str(missing), image="servekit"), "/models/m") == "/models/m"


# ---- through the hosting API and the orchestrator's plan ---------------------------------------------------------


class Envelopes:
    def envelope(self, instance_type: str) -> Envelope | None:
        return Envelope(2, 4 * 2**30, 0.056) if instance_type == "ml.t2.medium" else None


class NoBackend:
    async def start(self, spec: InstanceSpec) -> InstanceHandle:
        raise AssertionError("no instance is started in these tests")

    async def stop(self, handle: InstanceHandle, grace_s: float = 10.0) -> None:
        pass

    def alive(self, handle: InstanceHandle) -> bool:
        return False

    def log_tail(self, handle: InstanceHandle, lines: int = 20) -> str:
        return ""

    async def close(self) -> None:
        pass


@pytest.fixture
def hosting(tmp_path: Path, resolver: ArtifactResolver) -> Iterator[HostingService]:
    with StateDB.open(tmp_path / "home") as db:
        fleets = Orchestrator(
            db.hosting,
            NoBackend(),
            RoutingTable(),
            Envelopes(),
            lambda url: str(resolver.resolve(url).base_path),
            machine=Machine(cpus=4, memory_gib=16.0),
            cpus=[0, 1, 2, 3],
            framework_dir=tmp_path / "framework",
        )
        yield HostingService(db.hosting, fleets, Envelopes())


def create_model(hosting: HostingService, name: str, model: Path, env: dict[str, str], image: str = SKLEARN) -> Any:
    c = {"Image": image, "ModelDataUrl": str(model), "Environment": env}
    return asyncio.run(hosting.create_model({"ModelName": name, "PrimaryContainer": c}))


def test_create_model_refuses_unusable_code_and_the_plan_serves_the_composed_folder(
    tmp_path: Path, hosting: HostingService
) -> None:
    model = tar_gz(tmp_path / "model.tar.gz", {"model.joblib": b"w"})
    src = tar_gz(tmp_path / "sourcedir.tar.gz", {"train.py": TRAIN})
    bad = tar_gz(tmp_path / "bad.tar.gz", {"train.py": b"def predict_fn(d, m):\n    pass\n"})
    env = {"SAGEMAKER_PROGRAM": "train.py", "SAGEMAKER_SUBMIT_DIRECTORY": f"file://{bad}"}
    with pytest.raises(ApiError) as info:
        create_model(hosting, "bad", model, env)
    assert info.value.code == "ValidationException" and "defines no model_fn" in info.value.message
    assert hosting.repo.get_model("bad") is None
    with pytest.raises(ApiError, match=r"SAGEMAKER_PROGRAM serve\.py is not in"):
        create_model(hosting, "bad", model, {**env, "SAGEMAKER_PROGRAM": "serve.py"})
    create_model(hosting, "m", model, {**env, "SAGEMAKER_SUBMIT_DIRECTORY": f"file://{src}"})
    create_model(hosting, "plain", model, env, image="servekit")  # not a framework image: nothing checked
    variants = [{"VariantName": v, "ModelName": v, "InstanceType": "ml.t2.medium"} for v in ("m", "plain")]
    asyncio.run(hosting.create_endpoint_config({"EndpointConfigName": "cfg", "ProductionVariants": variants}))
    framework, plain = hosting.fleets.plan("ep", "cfg").variants
    assert Path(framework.model_dir).parent == tmp_path / "framework"
    assert (Path(framework.model_dir) / "1" / "code" / "train.py").read_bytes() == TRAIN
    assert framework.environment["SAGEMAKER_PROGRAM"] == "train.py"
    assert Path(plain.model_dir).parent.name == "archives"  # the model data as it is


TFS_IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/tensorflow-inference:2.19-cpu"


def _saved_model(folder: Path) -> Path:
    (folder / "variables").mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"graph")
    (folder / "variables" / "variables.index").write_bytes(b"index")
    return folder


def test_tf_servings_layouts_become_servekits_versions(tmp_path: Path) -> None:
    """What SageMaker's TF Serving container takes inside model.tar.gz (servekit unpacks it as <base>/1):
    <model>/<version>/saved_model.pb, several models with SAGEMAKER_TFS_DEFAULT_MODEL_NAME naming one; servekit's own
    layout and other images stay as they are; a code/inference.py (TFS's handlers) is refused saying so."""
    models = FrameworkModels(lambda url: url, tmp_path / "cache")
    one = tmp_path / "one"
    _saved_model(one / "1" / "tfs-test-model" / "00000123")
    composed = Path(models.model_dir(ContainerSpec(TFS_IMAGE), str(one), "tfs"))
    assert sorted(os.listdir(composed)) == ["123"]
    assert (composed / "123" / "saved_model.pb").read_bytes() == b"graph"
    assert (composed / "123" / "variables" / "variables.index").is_file()
    own = tmp_path / "own"
    _saved_model(own / "1")
    assert models.model_dir(ContainerSpec(TFS_IMAGE), str(own)) == str(own)
    assert models.model_dir(ContainerSpec("servekit"), str(one)) == str(one)
    two = tmp_path / "two"
    _saved_model(two / "1" / "a" / "1")
    _saved_model(two / "1" / "b" / "7")
    with pytest.raises(FrameworkError, match=r"2 TF Serving models \(a, b\): name the one"):
        models.model_dir(ContainerSpec(TFS_IMAGE), str(two))
    chosen = models.model_dir(ContainerSpec(TFS_IMAGE, environment={"SAGEMAKER_TFS_DEFAULT_MODEL_NAME": "b"}), str(two))
    assert sorted(os.listdir(chosen)) == ["7"]
    (one / "1" / "code").mkdir()
    (one / "1" / "code" / "inference.py").write_text("def input_handler(data, context): ...\n")
    with pytest.raises(FrameworkError, match="input_handler and output_handler"):
        models.model_dir(ContainerSpec(TFS_IMAGE), str(one))


def test_a_batch_run_composes_only_what_only_the_image_reads(tmp_path: Path) -> None:
    """Batch transform reads a framework script's artefact with servekit's runtimes, as it always has; a first-party
    algorithm's artefact gets the algorithm's inference script, as its endpoints do."""
    models = FrameworkModels(lambda url: url, tmp_path / "cache")
    base = tmp_path / "base"
    (base / "1").mkdir(parents=True)
    (base / "1" / "model_algo-1").write_bytes(b"centers")
    assert models.batch_model_dir(container(), str(base)) == str(base)
    kmeans = Path(
        models.batch_model_dir(ContainerSpec("382416733822.dkr.ecr.us-east-1.amazonaws.com/kmeans:1"), str(base))
    )
    manifest = tomllib.loads((kmeans / "1" / "servekit.toml").read_text())
    assert manifest == {"runtime": "python", "entry_point": "kmeans.py"}
    assert (kmeans / "1" / "code" / "kmeans.py").is_file() and (kmeans / "1" / "model_algo-1").is_file()


XGBOOST_IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1"
XGBOOST_INFERENCE = b"""
import os

import xgboost as xgb
from sagemaker_xgboost_container import encoder as xgb_encoders  # as SageMaker's XGBoost examples import it


def model_fn(model_dir):
    booster = xgb.Booster()
    booster.load_model(os.path.join(model_dir, "xgboost-model.json"))
    return booster


def input_fn(request_body, request_content_type):
    return xgb_encoders.decode(request_body, request_content_type)


def predict_fn(data, model):
    return model.predict(data).tolist()
"""


def test_an_xgboost_images_scripts_import_its_containers_library(tmp_path: Path, resolver: ArtifactResolver) -> None:
    """SageMaker's XGBoost container ships ``sagemaker_xgboost_container`` (its ``encoder`` reads CSV, libsvm and
    RecordIO-protobuf bodies into a DMatrix); an endpoint's inference script for that image imports it, as training
    scripts do."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(60, 3))
    booster = xgb.train({"objective": "reg:squarederror"}, xgb.DMatrix(x, label=x @ [1.0, -2.0, 0.5]), 5)
    saved = tmp_path / "xgboost-model.json"
    booster.save_model(saved)
    model = tar_gz(tmp_path / "model.tar.gz", {"xgboost-model.json": saved.read_bytes()})
    src = tar_gz(tmp_path / "sourcedir.tar.gz", {"inference.py": XGBOOST_INFERENCE})
    spec = container(f"file://{src}", "inference.py", image=XGBOOST_IMAGE)
    served = Path(models(resolver, tmp_path / "framework").model_dir(spec, str(resolver.resolve(str(model)).base_path)))
    manifest = tomllib.loads((served / "1" / "servekit.toml").read_text())
    [library] = manifest["python_path"]
    assert (Path(library) / "sagemaker_xgboost_container" / "encoder.py").is_file()
    sklearn_model = models(resolver, tmp_path / "framework").model_dir(
        container(f"file://{src}", "inference.py"), str(resolver.resolve(str(model)).base_path)
    )
    assert "python_path" not in tomllib.loads((Path(sklearn_model) / "1" / "servekit.toml").read_text())

    servable = RuntimeRegistry().load(served / "1")
    assert isinstance(servable, HandlerServable) and library in sys.path
    body, _ = servable.invoke(b"0.5,1.0,-1.0\n2.0,0.0,1.0\n", "text/csv", "application/json")
    expected = booster.predict(xgb.DMatrix(np.array([[0.5, 1.0, -1.0], [2.0, 0.0, 1.0]])))
    assert np.allclose(json.loads(bytes(body)), expected)
