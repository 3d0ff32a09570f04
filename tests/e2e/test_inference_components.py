"""Inference components (issue 29) on a real ``servekit up`` through boto3: an IC-based endpoint (an instance
type, no model; managed instance scaling from 0) hosts two components of different models, each invoked by name
(InferenceComponentName, also streamed and through a gateway replica) and answered by its own model's processes;
one component's copies scale (UpdateInferenceComponent, and Application Auto Scaling on its DesiredCopyCount)
without touching the other's processes; a component that does not fit is refused with the sizes
(ValidationException when it can never fit the instance type, Failed when the variant's instances are full), one
whose model cannot load fails with the load error; components come back after a restart; Delete stops its
processes; ListInferenceComponents filters by endpoint; the endpoint runs no instance (and costs nothing) while no
copy needs one."""

from __future__ import annotations

import json
import os
import signal
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest
import requests

from servekit.services.hosting.instance_types import load_instance_types
from servekit.testing.hosting import UpProcess, scaling_model

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # make test-slow: over 20 s in all

HANDLER = """
import json, os

def model_fn(model_dir):
    return {factor}

def transform_fn(model, data, content_type, accept):
    x = json.loads(data)["x"]
    return json.dumps({{"model": "{name}", "out": x * model, "pid": os.getpid()}}), "application/json"
"""
PRICE = load_instance_types().get("ml.m5.xlarge").price_per_hour  # type: ignore[union-attr]
XLARGE_VARIANT = {
    "VariantName": "AllTraffic",
    "InstanceType": "ml.m5.xlarge",  # 4 vCPUs, 16 GiB
    "InitialInstanceCount": 1,
    "ManagedInstanceScaling": {"Status": "ENABLED", "MinInstanceCount": 0, "MaxInstanceCount": 1},
    "RoutingConfig": {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"},
}


def poll(what: Callable[[], Any], until: Callable[[Any], bool], timeout_s: float = 90) -> Any:
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = what()
        if until(last):
            return last
        time.sleep(0.1)  # polling another process's state, with a deadline
    raise AssertionError(f"still {last!r} after {timeout_s}s")


def spec(model: str, cores: float = 1, memory_mb: int = 1024) -> dict[str, Any]:
    return {
        "ModelName": model,
        "ComputeResourceRequirements": {"NumberOfCpuCoresRequired": cores, "MinMemoryRequiredInMb": memory_mb},
    }


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    tmp = tmp_path_factory.mktemp("components")
    plane = UpProcess(tmp / "home", "--metrics-resolution-s", "1")
    plane.start()
    try:
        sm = plane.sm()
        for name, factor in (("alpha", 2.0), ("beta", 10.0)):
            code = tmp / name / "1" / "code"
            code.mkdir(parents=True)
            (code / "inference.py").write_text(textwrap.dedent(HANDLER.format(name=name, factor=factor)))
            sm.create_model(ModelName=name, PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(tmp / name)})
        yield plane
    finally:
        plane.stop()


def described(up: UpProcess, name: str) -> dict[str, Any]:
    return dict(up.sm().describe_inference_component(InferenceComponentName=name))


def in_service(up: UpProcess, name: str, copies: int) -> dict[str, Any]:
    return dict(
        poll(
            lambda: described(up, name),
            lambda d: (  # a failure ends the wait at once (the caller's assertions say why)
                d["InferenceComponentStatus"] == "Failed"
                or (d["InferenceComponentStatus"] == "InService" and d["RuntimeConfig"]["CurrentCopyCount"] == copies)
            ),
        )
    )


def copies(up: UpProcess, name: str) -> list[dict[str, Any]]:
    """servekit's ServekitCopies of DescribeInferenceComponent, read off the wire (botocore's parser keeps only
    the shape's members)."""
    seen: list[bytes] = []

    def keep(http_response: Any, **_: Any) -> None:
        seen.append(http_response.content)

    sm = up.sm()
    sm.meta.events.register("after-call.sagemaker.DescribeInferenceComponent", keep)
    sm.describe_inference_component(InferenceComponentName=name)
    return list(json.loads(seen[-1])["ServekitCopies"])


def pids(up: UpProcess, name: str) -> set[int]:
    """The live instance processes of a component's copies (their pid files, each checked alive)."""
    out = set()
    for copy in copies(up, name):
        pid = int((up.home / "instances" / f"{copy['InstanceId']}.pid").read_text())
        os.kill(pid, 0)  # raises if the process is gone
        out.add(pid)
    return out


def invoke(up: UpProcess, component: str | None, x: float = 1.0, endpoint: str = "ic") -> dict[str, Any]:
    extra = {"InferenceComponentName": component} if component else {}
    answer = up.rt().invoke_endpoint(
        EndpointName=endpoint, Body=json.dumps({"x": x}), ContentType="application/json", **extra
    )
    return dict(json.loads(answer["Body"].read()))


def cost(up: UpProcess, endpoint: str = "ic") -> float:
    """DescribeEndpoint's ServekitCostPerHour, read off the wire."""
    seen: list[bytes] = []
    sm = up.sm()
    sm.meta.events.register("after-call.sagemaker.DescribeEndpoint", lambda http_response, **_: seen.append(
        http_response.content))  # fmt: skip
    sm.describe_endpoint(EndpointName=endpoint)
    return float(json.loads(seen[-1])["ServekitCostPerHour"])


def instances(up: UpProcess, endpoint: str = "ic") -> int:
    return int(up.sm().describe_endpoint(EndpointName=endpoint)["ProductionVariants"][0]["CurrentInstanceCount"])


def test_two_components_on_one_endpoint_scaled_separately(up: UpProcess) -> None:
    sm = up.sm()
    sm.create_endpoint_config(EndpointConfigName="ic", ProductionVariants=[XLARGE_VARIANT])
    sm.create_endpoint(EndpointName="ic", EndpointConfigName="ic")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ic", WaiterConfig={"Delay": 1, "MaxAttempts": 60})
    assert instances(up) == 0  # MinInstanceCount 0 and no copy: no instance
    assert cost(up) == 0.0
    with pytest.raises(botocore.exceptions.ClientError) as unnamed:
        invoke(up, None)
    assert unnamed.value.response["Error"]["Code"] == "ValidationError"
    assert "InferenceComponentName" in unnamed.value.response["Error"]["Message"]

    for name in ("alpha", "beta"):
        arn = sm.create_inference_component(
            InferenceComponentName=name,
            EndpointName="ic",
            VariantName="AllTraffic",
            Specification=spec(name),
            RuntimeConfig={"CopyCount": 1},
        )["InferenceComponentArn"]
        assert arn.endswith(f":inference-component/{name}")
    alpha, beta = in_service(up, "alpha", 1), in_service(up, "beta", 1)
    assert alpha["InferenceComponentStatus"] == beta["InferenceComponentStatus"] == "InService"
    assert alpha["RuntimeConfig"] == {"DesiredCopyCount": 1, "CurrentCopyCount": 1}
    assert alpha["Specification"] == spec("alpha") and alpha["EndpointName"] == "ic"
    assert instances(up) == 1
    assert cost(up) == pytest.approx(PRICE)  # one instance in use
    assert invoke(up, "alpha", 3.0)["out"] == 6.0 and invoke(up, "alpha")["model"] == "alpha"
    assert invoke(up, "beta", 3.0)["out"] == 30.0 and invoke(up, "beta")["model"] == "beta"
    streamed = up.rt().invoke_endpoint_with_response_stream(
        EndpointName="ic", InferenceComponentName="beta", Body=json.dumps({"x": 4.0}), ContentType="application/json"
    )
    parts = b"".join(e["PayloadPart"]["Bytes"] for e in streamed["Body"] if "PayloadPart" in e)
    assert json.loads(parts)["out"] == 40.0  # the streaming call routes by component too
    alpha_pids, beta_pids = pids(up, "alpha"), pids(up, "beta")
    assert len(alpha_pids) == len(beta_pids) == 1 and not alpha_pids & beta_pids  # two sets of processes

    # one component's copies scale; the other's process is the same one
    sm.update_inference_component(InferenceComponentName="alpha", RuntimeConfig={"CopyCount": 2})
    assert in_service(up, "alpha", 2)["RuntimeConfig"] == {"DesiredCopyCount": 2, "CurrentCopyCount": 2}
    grown = pids(up, "alpha")
    assert len(grown) == 2 and alpha_pids < grown
    assert pids(up, "beta") == beta_pids
    page = requests.get(f"{up.url}/console/endpoints/ic", timeout=30)
    assert page.status_code == 200 and "Inference components" in page.text  # the console's endpoint page
    assert "m5.xlarge" in page.text and '<span data-field="copies">2</span>' in page.text
    answered = {invoke(up, "alpha")["pid"] for _ in range(30)}
    assert answered <= grown and all(invoke(up, "beta")["pid"] in beta_pids for _ in range(3))

    # room on the one instance: 4 vCPUs, 3 cores taken; a 2-core copy fails with the sizes, an 8-core one never fits
    sm.create_inference_component(
        InferenceComponentName="gamma", EndpointName="ic", Specification=spec("beta", cores=2),
        RuntimeConfig={"CopyCount": 1},
    )  # fmt: skip
    gamma = poll(lambda: described(up, "gamma"), lambda d: d["InferenceComponentStatus"] == "Failed")
    assert "needs 2 CPU core(s) and 1024 MB" in gamma["FailureReason"]
    assert "at most 1 core(s)" in gamma["FailureReason"] and gamma["RuntimeConfig"]["CurrentCopyCount"] == 0
    # a model that cannot load fits (1 core) but fails with its load error, and gives the core back
    scaling_model(up.home.parent, "broken", 1.0, broken=True)
    sm.create_model(ModelName="broken", PrimaryContainer={"Image": "servekit",
                                                          "ModelDataUrl": str(up.home.parent / "broken")})  # fmt: skip
    sm.create_inference_component(
        InferenceComponentName="bad", EndpointName="ic", Specification=spec("broken"), RuntimeConfig={"CopyCount": 1}
    )
    bad = poll(lambda: described(up, "bad"), lambda d: d["InferenceComponentStatus"] == "Failed")
    assert "weights file is corrupt" in bad["FailureReason"] and bad["RuntimeConfig"]["CurrentCopyCount"] == 0
    with pytest.raises(botocore.exceptions.ClientError) as never:
        sm.create_inference_component(
            InferenceComponentName="huge", EndpointName="ic", Specification=spec("beta", cores=8),
            RuntimeConfig={"CopyCount": 1},
        )  # fmt: skip
    assert never.value.response["Error"]["Code"] == "ValidationException"
    assert "8 CPU core(s)" in never.value.response["Error"]["Message"]
    assert "ml.m5.xlarge has 4 vCPU(s) and 16384 MB" in never.value.response["Error"]["Message"]

    with pytest.raises(botocore.exceptions.ClientError) as unknown:
        invoke(up, "nope")
    assert unknown.value.response["Error"]["Code"] == "ValidationError"

    # another IC endpoint; the listing filters by endpoint
    sm.create_endpoint_config(EndpointConfigName="ic2", ProductionVariants=[XLARGE_VARIANT])
    sm.create_endpoint(EndpointName="ic2", EndpointConfigName="ic2")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ic2", WaiterConfig={"Delay": 1, "MaxAttempts": 60})
    sm.create_inference_component(
        InferenceComponentName="idle", EndpointName="ic2", Specification=spec("alpha"), RuntimeConfig={"CopyCount": 0}
    )
    listed = sm.list_inference_components(EndpointNameEquals="ic", SortBy="Name", SortOrder="Ascending")
    assert [c["InferenceComponentName"] for c in listed["InferenceComponents"]] == ["alpha", "bad", "beta", "gamma"]
    listed = sm.list_inference_components(EndpointNameEquals="ic2")
    assert [c["InferenceComponentName"] for c in listed["InferenceComponents"]] == ["idle"]
    assert in_service(up, "idle", 0)["InferenceComponentStatus"] == "InService"
    assert instances(up, "ic2") == 0  # no copy needs an instance


def test_application_auto_scaling_sets_a_components_copy_count(up: UpProcess) -> None:
    beta_pids = pids(up, "beta")
    aas = up.client("application-autoscaling")
    target = {
        "ServiceNamespace": "sagemaker",
        "ResourceId": "inference-component/alpha",
        "ScalableDimension": "sagemaker:inference-component:DesiredCopyCount",
    }
    with pytest.raises(botocore.exceptions.ClientError) as wrong:
        aas.register_scalable_target(**{**target, "ScalableDimension": "sagemaker:variant:DesiredInstanceCount"},
                                     MinCapacity=0, MaxCapacity=1)  # fmt: skip
    assert "sagemaker:inference-component:DesiredCopyCount" in wrong.value.response["Error"]["Message"]
    # alpha runs 2 copies; a maximum of 1 (and a minimum of 0, allowed for a component) scales it in
    aas.register_scalable_target(**target, MinCapacity=0, MaxCapacity=1)
    assert in_service(up, "alpha", 1)["RuntimeConfig"]["DesiredCopyCount"] == 1
    assert len(pids(up, "alpha")) == 1 and pids(up, "beta") == beta_pids

    # target tracking on InvocationsPerCopy: steady traffic on alpha over a tiny target scales it out to 2
    aas.register_scalable_target(**target, MinCapacity=1, MaxCapacity=2)
    aas.put_scaling_policy(
        PolicyName="per-copy", PolicyType="TargetTrackingScaling", **target,
        TargetTrackingScalingPolicyConfiguration={
            "TargetValue": 1.0, "ScaleOutCooldown": 0, "ScaleInCooldown": 600, "DisableScaleIn": True,
            "PredefinedMetricSpecification": {"PredefinedMetricType": "SageMakerInferenceComponentInvocationsPerCopy"},
        },
    )  # fmt: skip
    deadline = time.monotonic() + 90
    while described(up, "alpha")["RuntimeConfig"]["DesiredCopyCount"] < 2:
        assert time.monotonic() < deadline, "alpha was not scaled out on its InvocationsPerCopy"
        invoke(up, "alpha")
    assert in_service(up, "alpha", 2)["RuntimeConfig"]["CurrentCopyCount"] == 2
    assert pids(up, "beta") == beta_pids
    poll(  # the scaler settles its activity on its next look at the component
        lambda: {a["StatusCode"] for a in aas.describe_scaling_activities(
            ServiceNamespace="sagemaker", ResourceId=target["ResourceId"])["ScalingActivities"]},
        lambda codes: codes == {"Successful"},
    )  # fmt: skip
    cw = up.client("cloudwatch")
    listed = cw.list_metrics(
        Namespace="AWS/SageMaker", Dimensions=[{"Name": "InferenceComponentName", "Value": "alpha"}]
    )
    published = {m["MetricName"] for m in listed["Metrics"]}
    assert {"Invocations", "InvocationsPerCopy", "ModelLatency", "ModelSetupTime"} <= published
    aas.deregister_scalable_target(**target)


def test_a_gateway_replica_routes_by_component(up: UpProcess) -> None:
    """``servekit up --role gateway`` on the same home: InferenceComponentName routes to the leader's copies."""
    replica = UpProcess(up.home, "--role", "gateway")
    replica.start()
    try:
        assert invoke(replica, "beta", 3.0)["model"] == "beta" and invoke(replica, "alpha", 3.0)["out"] == 6.0
        with pytest.raises(botocore.exceptions.ClientError) as unknown:
            invoke(replica, "nope")
        assert "Inference component nope not found for endpoint ic" in unknown.value.response["Error"]["Message"]
    finally:
        replica.stop()


def test_components_survive_a_restart_and_delete_stops_their_processes(up: UpProcess) -> None:
    sm = up.sm()
    before = pids(up, "beta")
    up.stop()
    up.start()
    assert described(up, "beta")["InferenceComponentStatus"] == "InService"  # serving once /ping answers
    assert invoke(up, "beta", 2.0)["out"] == 20.0
    assert pids(up, "beta").isdisjoint(before)  # new processes for the same component

    # a copy that dies is replaced: the component gets a new process, the other's is left alone
    (dead,) = pids(up, "beta")
    alpha_before = pids(up, "alpha")
    os.kill(dead, signal.SIGKILL)
    poll(lambda: _replaced(up, "beta", dead), bool)
    assert invoke(up, "beta", 1.0)["model"] == "beta" and pids(up, "alpha") == alpha_before

    with pytest.raises(botocore.exceptions.ClientError) as busy:
        sm.delete_endpoint(EndpointName="ic")
    assert "delete them first" in busy.value.response["Error"]["Message"]

    # a failed component updated to a specification that fits (another model, 1 core): Failed -> Updating -> InService
    sm.update_inference_component(InferenceComponentName="gamma", Specification=spec("alpha"),
                                  RuntimeConfig={"CopyCount": 1})  # fmt: skip
    gamma = in_service(up, "gamma", 1)
    assert gamma["InferenceComponentStatus"] == "InService" and "FailureReason" not in gamma
    assert gamma["Specification"]["ModelName"] == "alpha" and invoke(up, "gamma", 5.0) == {
        "model": "alpha", "out": 10.0, "pid": next(iter(pids(up, "gamma")))
    }  # fmt: skip

    alpha = pids(up, "alpha")
    sm.delete_inference_component(InferenceComponentName="alpha")
    poll(lambda: [c["InferenceComponentName"] for c in sm.list_inference_components()["InferenceComponents"]],
         lambda names: "alpha" not in names)  # fmt: skip
    for pid in alpha:
        poll(lambda pid=pid: _alive(pid), lambda alive: not alive, timeout_s=30)
    assert invoke(up, "beta", 1.0)["model"] == "beta"  # the other component is untouched
    for name in ("bad", "beta", "gamma", "idle"):
        sm.delete_inference_component(InferenceComponentName=name)
    poll(lambda: sm.list_inference_components()["InferenceComponents"], lambda left: left == [])
    assert instances(up) == 0 and cost(up) == 0.0  # no copy left: managed instance scaling gives the instance back
    sm.delete_endpoint(EndpointName="ic")


def _replaced(up: UpProcess, name: str, dead: int) -> bool:
    """Whether the component serves its copies again, none of them the ``dead`` process."""
    try:
        now = pids(up, name)
    except (OSError, ValueError):  # the pid file of the replacement is not written yet, or the old one is gone
        return False
    return dead not in now and described(up, name)["RuntimeConfig"]["CurrentCopyCount"] == len(now) == 1


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_copies_on_a_gpu_instance_type_hold_no_gpu(up: UpProcess) -> None:
    """A component's copy asks for no accelerator (NumberOfAcceleratorDevicesRequired is refused), so on an IC-based
    variant of a GPU instance type it is a CPU process and serves on a machine without a GPU (an endpoint instance of
    that type would need the type's GPU)."""
    sm = up.sm()
    gpu_variant = {**XLARGE_VARIANT, "InstanceType": "ml.g4dn.xlarge"}
    sm.create_endpoint_config(EndpointConfigName="ic-gpu", ProductionVariants=[gpu_variant])
    sm.create_endpoint(EndpointName="ic-gpu", EndpointConfigName="ic-gpu")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ic-gpu", WaiterConfig={"Delay": 1, "MaxAttempts": 60})
    sm.create_inference_component(
        InferenceComponentName="on-gpu-type", EndpointName="ic-gpu", Specification=spec("beta"),
        RuntimeConfig={"CopyCount": 1},
    )  # fmt: skip
    described_ = in_service(up, "on-gpu-type", 1)
    assert described_["InferenceComponentStatus"] == "InService", described_.get("FailureReason")
    assert invoke(up, "on-gpu-type", 2.0, endpoint="ic-gpu")["out"] == 20.0
    with pytest.raises(botocore.exceptions.ClientError) as accelerators:
        sm.create_inference_component(
            InferenceComponentName="wants-gpu", EndpointName="ic-gpu",
            Specification={**spec("beta"), "ComputeResourceRequirements": {
                "NumberOfAcceleratorDevicesRequired": 1, "MinMemoryRequiredInMb": 1024}},
            RuntimeConfig={"CopyCount": 1},
        )  # fmt: skip
    assert "no accelerator devices" in accelerators.value.response["Error"]["Message"]
    sm.delete_inference_component(InferenceComponentName="on-gpu-type")
    poll(lambda: sm.list_inference_components(EndpointNameEquals="ic-gpu")["InferenceComponents"], lambda c: c == [])
    sm.delete_endpoint(EndpointName="ic-gpu")
