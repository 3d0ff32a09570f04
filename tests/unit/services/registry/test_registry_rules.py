"""The registry's pure decisions as tables: the approval lifecycle, the deploy rule's short form and the
DeploymentConfig it makes, and derived resource names."""

from __future__ import annotations

from typing import Any

import pytest

from servekit.services.registry.approval import IllegalApproval, ModelApproval, check_approval
from servekit.services.registry.deploy import (
    DEPLOYMENT_TAG,
    ENDPOINT_TAG,
    VARIANT_TAG,
    Deployment,
    deployment_config,
    derived_name,
    parse_deployment,
    rule_from_tags,
    rule_tags,
)

P, A, R = ModelApproval.PENDING, ModelApproval.APPROVED, ModelApproval.REJECTED


@pytest.mark.parametrize(
    ("current", "to", "legal"),
    [
        (P, A, True),
        (P, R, True),
        (A, R, True),
        (R, A, True),
        (P, P, True),  # no change (an ApprovalDescription update)
        (A, A, True),
        (A, P, False),  # a decision is never undone into "undecided"
        (R, P, False),
    ],
)
def test_approval_transitions(current: ModelApproval, to: ModelApproval, legal: bool) -> None:
    if legal:
        check_approval(current, to)
    else:
        with pytest.raises(IllegalApproval, match=f"can be changed to .*, not to {to}"):
            check_approval(current, to)


def test_approval_values_are_sagemakers() -> None:
    assert {str(a) for a in ModelApproval} == {"PendingManualApproval", "Approved", "Rejected"}


@pytest.mark.parametrize(
    ("text", "config"),
    [
        ("", None),
        ("all", None),
        (
            "all wait=30 alarm=p99",
            {
                "BlueGreenUpdatePolicy": {
                    "TrafficRoutingConfiguration": {"Type": "ALL_AT_ONCE", "WaitIntervalInSeconds": 30}
                },
                "AutoRollbackConfiguration": {"Alarms": [{"AlarmName": "p99"}]},
            },
        ),
        (
            "canary=10 wait=300 bake=600 alarm=a alarm=b",
            {
                "BlueGreenUpdatePolicy": {
                    "TrafficRoutingConfiguration": {
                        "Type": "CANARY",
                        "WaitIntervalInSeconds": 300,
                        "CanarySize": {"Type": "CAPACITY_PERCENT", "Value": 10},
                    },
                    "TerminationWaitInSeconds": 600,
                },
                "AutoRollbackConfiguration": {"Alarms": [{"AlarmName": "a"}, {"AlarmName": "b"}]},
            },
        ),
        (
            "linear=20 wait=60 timeout=3600",
            {
                "BlueGreenUpdatePolicy": {
                    "TrafficRoutingConfiguration": {
                        "Type": "LINEAR",
                        "WaitIntervalInSeconds": 60,
                        "LinearStepSize": {"Type": "CAPACITY_PERCENT", "Value": 20},
                    },
                    "MaximumExecutionTimeoutInSeconds": 3600,
                }
            },
        ),
        (
            "rolling=25 wait=10",
            {
                "RollingUpdatePolicy": {
                    "MaximumBatchSize": {"Type": "CAPACITY_PERCENT", "Value": 25},
                    "WaitIntervalInSeconds": 10,
                }
            },
        ),
        (
            "steps=5/20/50/100 wait=60",
            {
                "BlueGreenUpdatePolicy": {
                    "TrafficRoutingConfiguration": {"Type": "ALL_AT_ONCE", "WaitIntervalInSeconds": 60}
                }
            },
        ),
    ],
)
def test_the_short_form_becomes_sagemakers_deployment_config(text: str, config: dict[str, Any] | None) -> None:
    assert deployment_config(parse_deployment(text)) == config


def test_steps_are_kept_for_the_endpoint_configs_traffic_steps_tag() -> None:
    assert parse_deployment("steps=5/20/50/100").steps == (5.0, 20.0, 50.0, 100.0)
    assert parse_deployment("") == Deployment()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("canary=10 linear=20", "give one of"),
        ("canary=ten", "takes a whole number"),
        ("steps=50/20/100", "steps must grow to 100"),
        ("steps=5/20", "steps must grow to 100"),
        ("rolling=25 bake=10", "blue/green deployments"),
        ("fast", "cannot read 'fast'"),
        ("all=3", "'all' takes no value"),
        ("canary=90 wait=1", "Canary"),  # the checks UpdateEndpoint makes, made when the rule is set
        ("canary=10 wait=100 timeout=50", "MaximumExecutionTimeoutInSeconds"),
    ],
)
def test_bad_short_forms_say_what_is_expected(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_deployment(text)


def test_rules_from_tags() -> None:
    assert rule_from_tags([{"Key": "team", "Value": "ml"}]) is None
    rule = rule_from_tags(rule_tags("ep", "blue", "canary=10 wait=5"))
    assert rule is not None and (rule.endpoint, rule.variant) == ("ep", "blue")
    assert (
        rule.to_json()["DeploymentConfig"]["BlueGreenUpdatePolicy"]["TrafficRoutingConfiguration"]["Type"] == "CANARY"
    )
    with pytest.raises(ValueError, match=ENDPOINT_TAG):  # a variant or deployment without the endpoint
        rule_from_tags([{"Key": VARIANT_TAG, "Value": "blue"}])
    with pytest.raises(ValueError, match=DEPLOYMENT_TAG):
        rule_from_tags([{"Key": ENDPOINT_TAG, "Value": "ep"}, {"Key": DEPLOYMENT_TAG, "Value": "canary"}])
    assert rule_tags("ep", deployment="  canary=10   wait=5 ")[-1]["Value"] == "canary=10 wait=5"


def test_derived_names_stay_within_63_characters_and_distinct() -> None:
    assert derived_name("churn", "v3") == "churn-v3"
    assert derived_name("ep-", "-churn", "v1") == "ep-churn-v1"
    a = derived_name("e" * 40, "g" * 40, "v1")
    b = derived_name("e" * 40, "g" * 40, "v2")
    assert len(a) == len(b) == 63 and a != b and not a.endswith("-")
