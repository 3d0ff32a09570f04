"""Deploy on approval: a model package group's rule "when a version becomes Approved, update endpoint X (with
deployment config Y)", and the deployment it makes, through the hosting API's own operations.

**The rule lives in the group's tags**, because a tag is the one extension every SageMaker client already carries
(``CreateModelPackageGroup(Tags=...)``, ``AddTags``/``DeleteTags``/``ListTags`` on the group's ARN, the console,
Terraform), and it needs no operation botocore does not know. SageMaker's tag values allow no JSON (letters,
digits, spaces and ``_ . : / = + - @``, at most 256), so the deployment config is written in a short form:

==========================================  =============================================================
tag                                          value
==========================================  =============================================================
``servekit:DeployOnApproval:Endpoint``       the endpoint to update (required: no tag, no rule)
``servekit:DeployOnApproval:Variant``        the production variant whose model is replaced (optional when
                                             the endpoint's config has one variant)
``servekit:DeployOnApproval:Deployment``     space-separated: one of ``all`` (default), ``canary=P``,
                                             ``linear=P``, ``steps=5/20/50/100``, ``rolling=P`` (P: percent
                                             of capacity), then ``wait=S`` (WaitIntervalInSeconds),
                                             ``bake=S`` (TerminationWaitInSeconds), ``timeout=S``
                                             (MaximumExecutionTimeoutInSeconds) and ``alarm=NAME`` (repeat:
                                             AutoRollbackConfiguration's alarms)
==========================================  =============================================================

e.g. ``canary=10 wait=300 bake=600 alarm=churn-p99 alarm=churn-5xx``. :func:`deployment_config` turns it into
SageMaker's ``DeploymentConfig`` (``steps`` into a blue/green update whose endpoint config carries
``servekit:TrafficSteps``), checked by the same code that checks UpdateEndpoint's.

**The deployment** (:class:`Deployer`) is what a person would do with boto3: CreateModel from the approved
package (``PrimaryContainer.ModelPackageName``, so DescribeModel names the package, as on AWS), CreateEndpointConfig
copying the endpoint's current config with that model in the rule's variant, then UpdateEndpoint with the rule's
DeploymentConfig (``RetainAllVariantProperties``: live instance counts and weights stay, so an autoscaled
endpoint keeps its capacity). It calls the hosting service's public handlers, never its state, so every check
UpdateEndpoint makes (endpoint InService, alarms exist, autoscaled variants) applies to it too.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servekit.aws.errors import ApiError
from servekit.aws.front import Handler
from servekit.services.hosting import rollout
from servekit.services.hosting.api import STEPS_TAG

TAG_PREFIX = "servekit:DeployOnApproval:"
ENDPOINT_TAG = TAG_PREFIX + "Endpoint"
VARIANT_TAG = TAG_PREFIX + "Variant"
DEPLOYMENT_TAG = TAG_PREFIX + "Deployment"
RULE_TAGS = (ENDPOINT_TAG, VARIANT_TAG, DEPLOYMENT_TAG)

_KINDS = ("all", "canary", "linear", "steps", "rolling")
_SECONDS = {"wait": "WaitIntervalInSeconds", "bake": "TerminationWaitInSeconds", "timeout": "timeout"}
_FORM = (
    "space-separated: one of all, canary=P, linear=P, steps=A/B/.../100, rolling=P (P: percent of capacity), then "
    "wait=S, bake=S, timeout=S (seconds) and alarm=NAME (repeatable), e.g. 'canary=10 wait=300 alarm=p99'"
)


@dataclass(frozen=True, slots=True)
class Deployment:
    """A parsed ``servekit:DeployOnApproval:Deployment`` value."""

    kind: str = "all"
    size: int | None = None  # percent of capacity (canary, linear, rolling)
    steps: tuple[float, ...] = ()  # traffic percentages (steps)
    wait_s: int = 0
    bake_s: int | None = None
    timeout_s: int | None = None
    alarms: tuple[str, ...] = ()


def parse_deployment(text: str) -> Deployment:
    """The short form (see the module doc); ``ValueError`` naming the form for anything else."""
    kind, size, alarms = "all", None, []
    steps: tuple[float, ...] = ()
    seconds: dict[str, int] = {}
    kinds_seen = 0
    for token in text.split():
        key, eq, value = token.partition("=")
        if key in _KINDS:
            kinds_seen += 1
            kind = key
            if key == "all":
                if eq:
                    raise ValueError(f"'all' takes no value ({_FORM})")
            elif key == "steps":
                try:
                    steps = tuple(float(x) for x in value.split("/") if x)
                    rollout.custom_policy(steps, wait_s=0)  # checks they grow to 100
                except ValueError:
                    raise ValueError(f"steps must grow to 100, e.g. steps=5/20/50/100, not {value!r}") from None
            else:
                size = _int(key, value)
        elif key in _SECONDS and eq:
            seconds[key] = _int(key, value)
        elif key == "alarm" and value:
            alarms.append(value)
        else:
            raise ValueError(f"cannot read {token!r} ({_FORM})")
    if kinds_seen > 1:
        raise ValueError(f"give one of {', '.join(_KINDS)}, not several ({_FORM})")
    if kind == "rolling" and "bake" in seconds:
        raise ValueError("bake= (TerminationWaitInSeconds) is for blue/green deployments, not rolling=")
    deployment = Deployment(
        kind, size, steps, seconds.get("wait", 0), seconds.get("bake"), seconds.get("timeout"), tuple(alarms)
    )
    config = deployment_config(deployment)
    try:  # the checks UpdateEndpoint will make (sizes, timeouts), now rather than at approval time
        rollout.policy_from(config, 100)
    except ValueError as exc:
        raise ValueError(f"{exc} ({_FORM})") from None
    return deployment


def _int(key: str, value: str) -> int:
    if not value.isdigit():
        raise ValueError(f"{key}= takes a whole number, not {value!r} ({_FORM})")
    return int(value)


def deployment_config(d: Deployment) -> dict[str, Any] | None:
    """SageMaker's UpdateEndpoint ``DeploymentConfig`` for ``d`` (None: plain blue/green, all at once)."""
    rollback = {"AutoRollbackConfiguration": {"Alarms": [{"AlarmName": a} for a in d.alarms]}} if d.alarms else {}
    if d.kind == "rolling":
        policy: dict[str, Any] = {
            "MaximumBatchSize": {"Type": "CAPACITY_PERCENT", "Value": d.size},
            "WaitIntervalInSeconds": d.wait_s,
        }
        if d.timeout_s is not None:
            policy["MaximumExecutionTimeoutInSeconds"] = d.timeout_s
        return {"RollingUpdatePolicy": policy, **rollback}
    if d == Deployment():
        return None
    routing: dict[str, Any] = {"Type": "ALL_AT_ONCE", "WaitIntervalInSeconds": d.wait_s}
    if d.kind == "canary":
        routing.update(Type="CANARY", CanarySize={"Type": "CAPACITY_PERCENT", "Value": d.size})
    elif d.kind == "linear":
        routing.update(Type="LINEAR", LinearStepSize={"Type": "CAPACITY_PERCENT", "Value": d.size})
    blue_green: dict[str, Any] = {"TrafficRoutingConfiguration": routing}
    if d.bake_s is not None:
        blue_green["TerminationWaitInSeconds"] = d.bake_s
    if d.timeout_s is not None:
        blue_green["MaximumExecutionTimeoutInSeconds"] = d.timeout_s
    return {"BlueGreenUpdatePolicy": blue_green, **rollback}


@dataclass(frozen=True, slots=True)
class DeployRule:
    endpoint: str
    variant: str | None
    deployment_text: str
    deployment: Deployment

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"EndpointName": self.endpoint, "Deployment": self.deployment_text or "all"}
        if self.variant:
            out["VariantName"] = self.variant
        config = deployment_config(self.deployment)
        if config is not None:
            out["DeploymentConfig"] = config
        if self.deployment.steps:
            out["TrafficSteps"] = list(self.deployment.steps)
        return out


def rule_from_tags(tags: Sequence[Mapping[str, Any]]) -> DeployRule | None:
    """The group's rule (None without an Endpoint tag); ``ValueError`` for a tag that cannot be read."""
    values = {str(t.get("Key")): str(t.get("Value", "")) for t in tags}
    endpoint = values.get(ENDPOINT_TAG, "").strip()
    if not endpoint:
        if values.get(VARIANT_TAG) or values.get(DEPLOYMENT_TAG):
            raise ValueError(f"a deploy-on-approval rule needs the tag {ENDPOINT_TAG} (the endpoint to update)")
        return None
    text = values.get(DEPLOYMENT_TAG, "").strip()
    try:
        deployment = parse_deployment(text)
    except ValueError as exc:
        raise ValueError(f"tag {DEPLOYMENT_TAG}: {exc}") from None
    return DeployRule(endpoint, values.get(VARIANT_TAG, "").strip() or None, text, deployment)


def rule_tags(endpoint: str, variant: str | None = None, deployment: str = "") -> list[dict[str, str]]:
    """The tags that state a rule (checked as :func:`rule_from_tags` reads them)."""
    tags = [{"Key": ENDPOINT_TAG, "Value": endpoint}]
    if variant:
        tags.append({"Key": VARIANT_TAG, "Value": variant})
    if deployment.strip():
        tags.append({"Key": DEPLOYMENT_TAG, "Value": " ".join(deployment.split())})
    rule_from_tags(tags)
    return tags


# ---- the deployment ------------------------------------------------------------------------------------------------
_MAX_NAME = 63


def derived_name(*parts: str) -> str:
    """A model or endpoint config name from ``parts`` (joined by hyphens), within SageMaker's 63 characters: a long
    one keeps its start and gets a short hash of the whole, so two long names stay distinct."""
    name = re.sub(r"-+", "-", "-".join(p.strip("-") for p in parts if p)).strip("-")
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: _MAX_NAME - 9].rstrip('-')}-{digest}"


class Deployer:
    """Deploys an approved package by a rule, through ``hosting`` (operation name → the hosting API's handler)."""

    def __init__(self, hosting: Mapping[str, Handler]) -> None:
        self._hosting = hosting

    async def _call(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        return await self._hosting[operation](params)

    async def _exists(self, operation: str, key: str, name: str) -> dict[str, Any] | None:
        try:
            return await self._call(operation, {key: name})
        except ApiError as exc:
            if exc.code == "ValidationException" and "Could not find" in exc.message:
                return None
            raise

    async def deploy(self, rule: DeployRule, package_arn: str, group: str, version: int) -> dict[str, Any]:
        """Create the model and endpoint config, start UpdateEndpoint; what was done (``ApiError`` if refused)."""
        endpoint = await self._call("DescribeEndpoint", {"EndpointName": rule.endpoint})
        current = await self._call("DescribeEndpointConfig", {"EndpointConfigName": endpoint["EndpointConfigName"]})
        variants = [dict(v) for v in current["ProductionVariants"]]
        names = [v["VariantName"] for v in variants]
        variant = rule.variant or (names[0] if len(names) == 1 else None)
        if variant is None:
            raise ApiError(
                "ValidationException",
                f"endpoint {rule.endpoint} has variants {', '.join(names)}: the rule must name one ({VARIANT_TAG})",
            )
        if variant not in names:
            raise ApiError(
                "ValidationException",
                f"endpoint {rule.endpoint} has no variant {variant} (it has {', '.join(names)})",
            )
        model = await self._model(package_arn, group, version)
        for v in variants:
            if v["VariantName"] == variant:
                v["ModelName"] = model
        config_name = await self._free_name(
            "DescribeEndpointConfig", "EndpointConfigName", rule.endpoint, group, version
        )
        request: dict[str, Any] = {"EndpointConfigName": config_name, "ProductionVariants": variants}
        for key in ("DataCaptureConfig", "ShadowProductionVariants", "AsyncInferenceConfig"):
            if current.get(key):
                request[key] = current[key]
        if rule.deployment.steps:
            steps = " ".join(f"{s:g}" for s in rule.deployment.steps)
            request["Tags"] = [{"Key": STEPS_TAG, "Value": steps}]
        await self._call("CreateEndpointConfig", request)
        update: dict[str, Any] = {
            "EndpointName": rule.endpoint,
            "EndpointConfigName": config_name,
            "RetainAllVariantProperties": True,
        }
        config = deployment_config(rule.deployment)
        if config is not None:
            update["DeploymentConfig"] = config
        await self._call("UpdateEndpoint", update)
        return {
            "EndpointName": rule.endpoint,
            "VariantName": variant,
            "ModelName": model,
            "EndpointConfigName": config_name,
            "PreviousEndpointConfigName": endpoint["EndpointConfigName"],
            "Deployment": rule.deployment_text or "all",
        }

    async def _model(self, package_arn: str, group: str, version: int) -> str:
        """The model made from this package: an existing one of the derived name that names the package, else a
        new one (CreateModel with ModelPackageName, so the hosting API checks the approval itself)."""
        base = derived_name(group, f"v{version}")
        for attempt in range(100):
            name = base if attempt == 0 else derived_name(base, str(attempt + 1))
            found = await self._exists("DescribeModel", "ModelName", name)
            if found is None:
                await self._call(
                    "CreateModel", {"ModelName": name, "PrimaryContainer": {"ModelPackageName": package_arn}}
                )
                return name
            if (found.get("PrimaryContainer") or {}).get("ModelPackageName", "").lower() == package_arn.lower():
                return name
        raise ApiError("ResourceLimitExceeded", f"no free model name like {base}")

    async def _free_name(self, operation: str, key: str, endpoint: str, group: str, version: int) -> str:
        base = derived_name(endpoint, group, f"v{version}")
        for attempt in range(100):
            name = base if attempt == 0 else derived_name(base, str(attempt + 1))
            if await self._exists(operation, key, name) is None:
                return name
        raise ApiError("ResourceLimitExceeded", f"no free endpoint config name like {base}")
