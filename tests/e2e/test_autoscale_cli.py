"""`servekit endpoint scale` and `servekit autoscale ...` as real processes against a real `servekit up`, checked
through botocore clients signed with the home's key."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.test_hosting_cli import one_line_error, servekit

from servekit.testing.hosting import UpProcess
from servekit.testing.hosting import scaling_model as handler_model

pytestmark = pytest.mark.e2e
RID = "endpoint/dbl/variant/AllTraffic"


def counts(up: UpProcess) -> tuple[str, int, int]:
    desc = up.sm().describe_endpoint(EndpointName="dbl")
    [v] = desc["ProductionVariants"]
    return desc["EndpointStatus"], v["CurrentInstanceCount"], v["DesiredInstanceCount"]


@pytest.mark.slow  # make test-slow
def test_endpoint_scale_and_autoscale_commands(up: UpProcess, tmp_path: Path) -> None:
    deployed = servekit(up, "deploy", str(handler_model(tmp_path, "doubler", 2.0)), "--name", "dbl")
    assert deployed.returncode == 0, deployed.stderr

    scaled = servekit(up, "endpoint", "scale", "dbl", "--variant", "AllTraffic", "--count", "2")
    assert scaled.returncode == 0, scaled.stdout + scaled.stderr
    assert "endpoint dbl variant AllTraffic: 2 instance(s)" in scaled.stdout
    assert counts(up) == ("InService", 2, 2)
    nothing = servekit(up, "endpoint", "scale", "dbl", "--variant", "AllTraffic")
    assert nothing.returncode == 2 and "give --count, --weight or both" in nothing.stderr
    unknown = servekit(up, "endpoint", "scale", "dbl", "--variant", "Nope", "--count", "1")
    assert "ValidationException" in one_line_error(unknown, "servekit: ValidationException:")

    made = servekit(up, "autoscale", "dbl", "--variant", "AllTraffic", "--min", "1", "--max", "4", "--target",
                    "100", "--scale-in-cooldown", "60", "--json")  # fmt: skip
    assert made.returncode == 0, made.stderr
    arns = json.loads(made.stdout)
    assert arns["ScalableTargetARN"].startswith("arn:aws:application-autoscaling:")
    assert ":policyName/servekit-invocations-target" in arns["PolicyARN"]
    aas = up.client("application-autoscaling")
    [target] = aas.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"]
    assert (target["ResourceId"], target["MinCapacity"], target["MaxCapacity"]) == (RID, 1, 4)
    [policy] = aas.describe_scaling_policies(ServiceNamespace="sagemaker")["ScalingPolicies"]
    config = policy["TargetTrackingScalingPolicyConfiguration"]
    assert (config["TargetValue"], config["ScaleInCooldown"], config["ScaleOutCooldown"]) == (100.0, 60, 300)

    table = servekit(up, "autoscale", "describe", "dbl")
    assert table.returncode == 0, table.stderr
    assert "AllTraffic" in table.stdout and "100 invocations per minute per instance" in table.stdout
    described = json.loads(servekit(up, "autoscale", "describe", "dbl", "--json").stdout)
    assert [p["PolicyName"] for p in described["ScalingPolicies"]] == ["servekit-invocations-target"]
    none_yet = servekit(up, "autoscale", "activities", "dbl")
    assert none_yet.returncode == 0 and "no scaling activities for endpoint dbl" in none_yet.stdout

    # Raising Min above the count makes the scaler move the variant at its next tick (cooldowns do not apply).
    raised = servekit(up, "autoscale", "dbl", "--variant", "AllTraffic", "--min", "3", "--max", "4", "--target", "100")
    assert raised.returncode == 0 and "3-4 instances" in raised.stdout, raised.stderr
    deadline = time.monotonic() + 90
    activity: dict[str, Any] = {}
    while time.monotonic() < deadline:
        listed = json.loads(servekit(up, "autoscale", "activities", "dbl", "--json").stdout)["ScalingActivities"]
        if listed and listed[0]["StatusCode"] == "Successful":
            activity = listed[0]
            break
        time.sleep(0.5)  # polling servekit up's state
    assert activity, "no successful activity within 90 s"
    assert activity["Description"] == "Setting desired instance count to 3."
    assert activity["Cause"] == "minimum capacity was set to 3"
    assert counts(up) == ("InService", 3, 3)
    shown = servekit(up, "autoscale", "activities", "dbl")
    assert "Setting desired instance count to 3." in shown.stdout and "Successful" in shown.stdout

    off = servekit(up, "autoscale", "off", "dbl", "--variant", "AllTraffic")
    assert off.returncode == 0 and "autoscaling of endpoint/dbl/variant/AllTraffic is off" in off.stdout
    assert aas.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"] == []
    assert aas.describe_scaling_policies(ServiceNamespace="sagemaker")["ScalingPolicies"] == []
    again = servekit(up, "autoscale", "off", "dbl", "--variant", "AllTraffic")
    one_line_error(again, "servekit: ObjectNotFoundException: No scalable target registered")
    bad = servekit(up, "autoscale", "dbl", "--variant", "AllTraffic", "--min", "5", "--max", "2", "--target", "1")
    assert bad.returncode == 2 and "--min 5 is more than --max 2" in bad.stderr
