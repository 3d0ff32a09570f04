"""Multi-model endpoints through boto3 against a real ``servekit up``: models under one ModelDataUrl prefix loaded on
first use (a directory or a model.tar.gz), cache hits after, concurrent cold calls loading once, eviction when a
small instance's memory runs short (each model holds 40 MB), clear errors for a missing, hostile or broken
TargetModel, and SageMaker's refusals around TargetModel."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
import textwrap
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest

from servekit.testing.hosting import UpProcess, scaling_model

pytestmark = pytest.mark.e2e
FAST = {"Delay": 1, "MaxAttempts": 120}
BALLAST_MB = 40
HANDLER = textwrap.dedent(
    """
    import json

    def model_fn(model_dir):
        with open(f"{model_dir}/factor.txt") as f:
            factor = float(f.read())
        return factor, b"x" * (BALLAST * 2**20)  # resident memory the instance must account for

    def transform_fn(model, data, content_type, accept):
        return json.dumps({"out": [x * model[0] for x in json.loads(data)]}), "application/json"
    """
).replace("BALLAST", str(BALLAST_MB))
BROKEN = "def model_fn(model_dir):\n    raise RuntimeError('weights file is corrupt')\n"
TYPES = textwrap.dedent(
    """
    instance_types:
      - name: ml.mme.small
        vcpus: 1
        memory_gib: 0.2
        price_per_hour: 0.1
    """
)


def flat_model(root: Path, factor: float, handler: str = HANDLER) -> Path:
    (root / "code").mkdir(parents=True)
    (root / "code" / "inference.py").write_text(handler)
    (root / "factor.txt").write_text(str(factor))
    return root


def tar_model(path: Path, factor: float) -> None:
    path.parent.mkdir(parents=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, data in (("code/inference.py", HANDLER.encode()), ("factor.txt", str(factor).encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.fixture
def up(tmp_path: Path) -> Iterator[UpProcess]:
    types = tmp_path / "types.yaml"
    types.write_text(TYPES)
    u = UpProcess(tmp_path / "home", "--instance-types", str(types))
    u.start()
    try:
        yield u
    finally:
        u.stop()


def invoke(rt: Any, target: str, x: float = 1.0, endpoint: str = "mme") -> float:
    r = rt.invoke_endpoint(
        EndpointName=endpoint, Body=json.dumps([x]), ContentType="application/json", TargetModel=target
    )
    return float(json.loads(r["Body"].read())["out"][0])


def error(call: Any) -> dict[str, Any]:
    with pytest.raises(botocore.exceptions.ClientError) as err:
        call()
    return dict(err.value.response["Error"])


def loads_of(up: UpProcess) -> list[str]:
    """The instance's own log lines for each model it loaded."""
    return [
        line
        for log in (up.home / "instances").glob("*.log")
        for line in log.read_text(errors="replace").splitlines()
        if "servekit.serving.core.multi_model" in line and " loaded " in line
    ]


def test_models_load_on_first_use_are_cached_and_evicted_by_memory(up: UpProcess, tmp_path: Path) -> None:
    prefix = tmp_path / "prefix"
    for i in range(1, 5):
        flat_model(prefix / f"customer-{i}", float(i))
    tar_model(prefix / "tarred" / "model.tar.gz", 7.0)
    flat_model(prefix / "broken", 0.0, handler=BROKEN)
    sm, rt = up.sm(), up.rt()
    sm.create_model(
        ModelName="mme-m",
        PrimaryContainer={"Image": "servekit", "Mode": "MultiModel", "ModelDataUrl": str(prefix) + "/"},
    )
    sm.create_endpoint_config(
        EndpointConfigName="mme-cfg",
        ProductionVariants=[
            {"VariantName": "A", "ModelName": "mme-m", "InitialInstanceCount": 1, "InstanceType": "ml.mme.small"}
        ],
    )
    sm.create_endpoint(EndpointName="mme", EndpointConfigName="mme-cfg")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="mme", WaiterConfig=FAST)

    def cache(target: str) -> str:
        r = rt.invoke_endpoint(EndpointName="mme", Body=b"[1.0]", ContentType="application/json", TargetModel=target)
        return str(r["ResponseMetadata"]["HTTPHeaders"]["x-servekit-model-cache"])

    assert invoke(rt, "customer-1", 2.0) == 2.0
    assert invoke(rt, "customer-1", 3.0) == 3.0  # served from the instance's cache
    assert cache("customer-1") == "hit"
    assert invoke(rt, "tarred/model.tar.gz", 1.0) == 7.0  # SageMaker's archive, unpacked on first use

    with ThreadPoolExecutor(6) as pool:  # concurrent cold calls for one model: one load
        outs = list(pool.map(lambda _: invoke(up.rt(), "customer-2", 1.0), range(6)))
    assert outs == [2.0] * 6
    assert sum("from" in line for line in loads_of(up)) == 3  # customer-1, tarred, customer-2: once each

    # Memory for about two 40 MB models beside the process: more models unload the least recently used ones,
    # and a model unloaded is loaded again when asked for; nothing fails and the instance is never killed.
    for round_ in range(2):
        for i in (1, 2, 3, 4):
            assert invoke(rt, f"customer-{i}", 10.0) == 10.0 * i, round_
    assert sm.describe_endpoint(EndpointName="mme")["EndpointStatus"] == "InService"
    assert len(loads_of(up)) > 4  # some models had to come back

    missing = error(lambda: invoke(rt, "customer-99"))
    assert missing["Code"] == "ValidationError" and "customer-99" in missing["Message"]
    hostile = error(lambda: invoke(rt, "../../etc"))
    assert hostile["Code"] == "ValidationError" and ".." in hostile["Message"]
    broken = error(lambda: invoke(rt, "broken"))
    assert broken["Code"] == "ModelError" and "broken failed to load" in broken["Message"]
    assert invoke(rt, "customer-3", 1.0) == 3.0  # the instance serves on
    cw = up.client("cloudwatch")
    dims = [{"Name": "EndpointName", "Value": "mme"}, {"Name": "VariantName", "Value": "A"}]

    def stat(metric: str, statistic: str = "Sum", namespace: str = "AWS/SageMaker") -> float:
        now = time.time()
        points = cw.get_metric_statistics(
            Namespace=namespace,
            MetricName=metric,
            Dimensions=dims,
            StartTime=now - 3600,
            EndTime=now + 60,
            Period=3600,
            Statistics=[statistic],
        )["Datapoints"]
        return float(sum(p[statistic] for p in points))

    cli = [sys.executable, "-m", "servekit.cli.main", "endpoint", "describe", "mme", "--json"]
    described = subprocess.run(
        [*cli, "--url", up.url, "--home", str(up.home)],
        capture_output=True,
        text=True,
        check=True,
    )
    per_model = {m["TargetModel"]: m for m in json.loads(described.stdout)["ServekitModelCache"]}
    assert per_model["customer-2"]["Hits"] + per_model["customer-2"]["Misses"] == 6 + 2  # 6 concurrent, 2 rounds
    assert per_model["customer-1"]["Hits"] >= 2 and 0 < per_model["customer-1"]["HitRatio"] < 1
    hits, calls = stat("ModelCacheHit"), stat("ModelCacheHit", "SampleCount")
    assert 0 < hits < calls  # some requests found their model loaded, some did not
    assert stat("ModelLoadingTime", "SampleCount") >= 5 and stat("ModelUnloadingTime", "SampleCount") >= 1
    assert stat("LoadedModelCount", "Maximum", "/aws/sagemaker/Endpoints") >= 2
    no_target = error(lambda: rt.invoke_endpoint(EndpointName="mme", Body=b"[1]", ContentType="application/json"))
    assert no_target["Code"] == "ValidationError" and "TargetModel" in no_target["Message"]


def test_target_model_on_a_single_model_endpoint_is_refused_as_sagemaker_does(up: UpProcess, tmp_path: Path) -> None:
    sm, rt = up.sm(), up.rt()
    sm.create_model(
        ModelName="one",
        PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(scaling_model(tmp_path, "one", 2.0))},
    )
    sm.create_endpoint_config(
        EndpointConfigName="one-cfg",
        ProductionVariants=[
            {"VariantName": "A", "ModelName": "one", "InitialInstanceCount": 1, "InstanceType": "ml.mme.small"}
        ],
    )
    sm.create_endpoint(EndpointName="one", EndpointConfigName="one-cfg")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="one", WaiterConfig=FAST)
    with pytest.raises(botocore.exceptions.ClientError) as err:
        invoke(rt, "whatever.tar.gz", endpoint="one")
    assert err.value.response["Error"]["Code"] == "ValidationError"
    assert "not a multi-model endpoint" in err.value.response["Error"]["Message"]


def test_preloaded_models_are_warm_and_a_disabled_cache_unloads_after_each_call(up: UpProcess, tmp_path: Path) -> None:
    prefix = tmp_path / "prefix"
    for i in (1, 2):
        flat_model(prefix / f"c{i}", float(i))
    sm, rt = up.sm(), up.rt()
    sm.create_model(
        ModelName="warm",
        PrimaryContainer={
            "Image": "servekit",
            "Mode": "MultiModel",
            "ModelDataUrl": str(prefix),
            "Environment": {"SERVEKIT_MME_PRELOAD": "c1"},
        },
    )
    sm.create_model(
        ModelName="cold",
        PrimaryContainer={
            "Image": "servekit",
            "Mode": "MultiModel",
            "ModelDataUrl": str(prefix),
            "MultiModelConfig": {"ModelCacheSetting": "Disabled"},
        },
    )
    for name in ("warm", "cold"):
        sm.create_endpoint_config(
            EndpointConfigName=f"{name}-cfg",
            ProductionVariants=[
                {"VariantName": "A", "ModelName": name, "InitialInstanceCount": 1, "InstanceType": "ml.mme.small"}
            ],
        )
        sm.create_endpoint(EndpointName=name, EndpointConfigName=f"{name}-cfg")
    for name in ("warm", "cold"):
        sm.get_waiter("endpoint_in_service").wait(EndpointName=name, WaiterConfig=FAST)
    assert len(loads_of(up)) == 1  # c1, preloaded on the warm endpoint's instance before it took traffic

    assert invoke(rt, "c1", 1.0, endpoint="warm") == 1.0
    assert len(loads_of(up)) == 1  # a cache hit

    def unloads() -> int:
        return sum(
            "servekit.serving.core.manager" in line and "unloaded" in line
            for log in (up.home / "instances").glob("*.log")
            for line in log.read_text(errors="replace").splitlines()
        )

    for _ in range(3):
        before = unloads()
        assert invoke(rt, "c2", 1.0, endpoint="cold") == 2.0
        deadline = time.monotonic() + 10
        while unloads() == before and time.monotonic() < deadline:  # the unload runs after the answer
            time.sleep(0.05)
    assert len(loads_of(up)) == 4 and unloads() >= 3  # loaded for each call, unloaded after it
