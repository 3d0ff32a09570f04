"""Register and deploy steps: calls to the control plane's SageMaker API through a botocore client the entry
point hands in (:class:`ControlPlane`), so this package never imports the control plane itself."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from servekit.services.pipelines.definition.steps import METRICS_FILE, SERVICE_FAULT, THROTTLING
from servekit.services.pipelines.errors import StepFailure
from servekit.storage import join

DEPLOY_POLL_S = 1.0


class ControlPlane(Protocol):
    def sagemaker(self) -> Any:
        """A botocore ``sagemaker`` client of the control plane (e.g. a running ``servekit up``)."""
        ...


def failure(exc: BaseException) -> StepFailure:
    """``exc`` (a botocore error, usually) as a step failure whose error types retry policies can match:
    throttling is ``Step.THROTTLING``, a 5xx or an unreachable service ``Step.SERVICE_FAULT``."""
    if isinstance(exc, StepFailure):
        return exc
    types = [cls.__name__ for cls in type(exc).__mro__]
    response = getattr(exc, "response", None)
    message = f"{type(exc).__name__}: {exc}"
    if isinstance(response, Mapping):
        error = response.get("Error", {})
        code = str(error.get("Code", ""))
        status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        types.append(code)
        if "Throttl" in code:
            types.append(THROTTLING)
        if status >= 500:
            types.append(SERVICE_FAULT)
        message = f"{code}: {error.get('Message', '')}"
    elif any(t in types for t in ("EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError")):
        types.append(SERVICE_FAULT)
    return StepFailure(message, tuple(types))


def register(sm: Any, args: Mapping[str, Any], *, run_arn: str, run_id: str, step: str) -> dict[str, Any]:
    """CreateModelPackage (the group is created when missing); ClientToken makes a retried attempt idempotent."""
    group = str(args["ModelPackageGroupName"])
    _ensure_group(sm, group, run_arn)
    request: dict[str, Any] = {
        "ModelPackageGroupName": group,
        "ModelApprovalStatus": args.get("ModelApprovalStatus") or "PendingManualApproval",
        "InferenceSpecification": {
            "Containers": [{"Image": str(args.get("Image") or "servekit"), "ModelDataUrl": str(args["ModelDataUrl"])}],
            "SupportedContentTypes": ["application/json", "text/csv"],
            "SupportedResponseMIMETypes": ["application/json"],
        },
        "MetadataProperties": {"GeneratedBy": run_arn},
        "CustomerMetadataProperties": {
            **{str(k): str(v) for k, v in (args.get("CustomerMetadataProperties") or {}).items()},
            "servekit:pipeline-run": run_id,
            "servekit:step": step,
        },
        "ClientToken": f"{run_id}-{step}",
    }
    if args.get("ModelPackageDescription"):
        request["ModelPackageDescription"] = str(args["ModelPackageDescription"])
    if args.get("ModelMetrics"):
        stats = join(str(args["ModelMetrics"]), METRICS_FILE)
        request["ModelMetrics"] = {"ModelQuality": {"Statistics": {"ContentType": "application/json", "S3Uri": stats}}}
    arn = sm.create_model_package(**request)["ModelPackageArn"]
    described = sm.describe_model_package(ModelPackageName=arn)
    return {"ModelPackageArn": arn, "ModelPackageVersion": described.get("ModelPackageVersion")}


def _ensure_group(sm: Any, group: str, run_arn: str) -> None:
    from botocore.exceptions import ClientError

    try:
        sm.describe_model_package_group(ModelPackageGroupName=group)
        return
    except ClientError:
        pass
    try:
        sm.create_model_package_group(
            ModelPackageGroupName=group, ModelPackageGroupDescription=f"Created by pipeline run {run_arn}"
        )
    except ClientError as exc:  # another run created it meanwhile
        if "already exists" not in str(exc):
            raise


def deploy(
    sm: Any,
    args: Mapping[str, Any],
    *,
    run_id: str,
    deadline: float | None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """A model and an endpoint config named ``<endpoint>-<run id>``, then CreateEndpoint or UpdateEndpoint; done
    once the endpoint is InService on that config (a rolled-back update fails the step with its reason)."""
    from botocore.exceptions import ClientError

    endpoint = str(args["EndpointName"])
    name = f"{endpoint}-{run_id}"[:63].rstrip("-")
    container = (
        {"ModelPackageName": str(args["ModelPackageName"])}
        if args.get("ModelPackageName")
        else {"Image": "servekit", "ModelDataUrl": str(args["ModelDataUrl"])}
    )
    sm.create_model(ModelName=name, PrimaryContainer=container)
    variant = {
        "VariantName": "AllTraffic",
        "ModelName": name,
        "InstanceType": str(args.get("InstanceType") or "ml.m5.large"),
        "InitialInstanceCount": int(args.get("InitialInstanceCount") or 1),
    }
    sm.create_endpoint_config(EndpointConfigName=name, ProductionVariants=[variant])
    try:
        sm.describe_endpoint(EndpointName=endpoint)
        exists = True
    except ClientError:
        exists = False
    if exists:
        update: dict[str, Any] = {"EndpointName": endpoint, "EndpointConfigName": name}
        if args.get("DeploymentConfig"):
            update["DeploymentConfig"] = args["DeploymentConfig"]
        sm.update_endpoint(**update)
    else:
        sm.create_endpoint(EndpointName=endpoint, EndpointConfigName=name)
    while True:
        desc = sm.describe_endpoint(EndpointName=endpoint)
        status = desc["EndpointStatus"]
        if status == "InService" and desc.get("EndpointConfigName") == name:
            return {"EndpointArn": desc["EndpointArn"], "EndpointName": endpoint, "EndpointConfigName": name}
        if status == "Failed" or (status == "InService" and desc.get("FailureReason")):
            raise StepFailure(f"endpoint {endpoint} did not take {name}: {desc.get('FailureReason', status)}")
        if deadline is not None and clock() >= deadline:
            raise StepFailure(f"endpoint {endpoint} was still {status} at the step's timeout")
        sleep(DEPLOY_POLL_S)  # the endpoint changes in another process: poll it as boto3's waiters do
