"""A two-variant endpoint as servekit up's API describes it (the shapes the export reads), for the unit tests."""

from __future__ import annotations

import copy
from typing import Any

from servekit.services.hosting.capture import capture_args
from servekit.tools.export import EndpointSpec, Envelope, endpoint_spec

ENVELOPES = {"ml.m5.xlarge": Envelope(4, 16.0), "ml.c5.large": Envelope(2, 4.0), "ml.local.half": Envelope(1, 0.5)}
RESOURCE_A = "endpoint/churn/variant/A"
DIMENSION = "sagemaker:variant:DesiredInstanceCount"


def described() -> dict[str, Any]:
    return copy.deepcopy(
        {
            "endpoint": {
                "EndpointName": "churn",
                "EndpointConfigName": "churn-cfg",
                "EndpointStatus": "InService",
                "ProductionVariants": [
                    {
                        "VariantName": "A",
                        "CurrentWeight": 3.0,
                        "DesiredWeight": 3.0,
                        "CurrentInstanceCount": 2,
                        "DesiredInstanceCount": 2,
                    },
                    {
                        "VariantName": "B",
                        "CurrentWeight": 1.0,
                        "DesiredWeight": 1.0,
                        "CurrentInstanceCount": 1,
                        "DesiredInstanceCount": 1,
                    },
                ],
            },
            "config": {
                "EndpointConfigName": "churn-cfg",
                "ProductionVariants": [
                    {
                        "VariantName": "A",
                        "ModelName": "churn-a",
                        "InstanceType": "ml.m5.xlarge",
                        "InitialInstanceCount": 2,
                        "InitialVariantWeight": 3.0,
                    },
                    {
                        "VariantName": "B",
                        "ModelName": "churn-b",
                        "InstanceType": "ml.c5.large",
                        "InitialInstanceCount": 1,
                        "InitialVariantWeight": 1.0,
                    },
                ],
                "DataCaptureConfig": {
                    "EnableCapture": True,
                    "InitialSamplingPercentage": 50,
                    "DestinationS3Uri": "s3://capture-bucket/churn",
                    "CaptureOptions": [{"CaptureMode": "Input"}],
                },
            },
            "models": {
                "churn-a": {
                    "ModelName": "churn-a",
                    "PrimaryContainer": {
                        "Image": "servekit",
                        "ModelDataUrl": "s3://model-bucket/churn/a/model.tar.gz",
                        "Environment": {"SAGEMAKER_PROGRAM": "inference.py", "LOG_LEVEL": "info"},
                    },
                },
                "churn-b": {
                    "ModelName": "churn-b",
                    "PrimaryContainer": {"Image": "servekit", "ModelDataUrl": "/srv/models/churn-b"},
                },
            },
            "targets": [
                {
                    "ServiceNamespace": "sagemaker",
                    "ResourceId": RESOURCE_A,
                    "ScalableDimension": DIMENSION,
                    "MinCapacity": 2,
                    "MaxCapacity": 6,
                }
            ],
            "policies": [
                {
                    "PolicyName": "invocations",
                    "ServiceNamespace": "sagemaker",
                    "ResourceId": RESOURCE_A,
                    "ScalableDimension": DIMENSION,
                    "PolicyType": "TargetTrackingScaling",
                    "TargetTrackingScalingPolicyConfiguration": {
                        "TargetValue": 120.0,
                        "PredefinedMetricSpecification": {
                            "PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"
                        },
                        "ScaleInCooldown": 600,
                        "ScaleOutCooldown": 60,
                    },
                }
            ],
        }
    )


def spec_of(doc: dict[str, Any]) -> EndpointSpec:
    return endpoint_spec(
        doc["endpoint"],
        doc["config"],
        doc["models"],
        ENVELOPES,
        doc["targets"],
        doc["policies"],
        capture_flags=capture_args,
    )


def policy(name: str, config: dict[str, Any], resource: str = RESOURCE_A) -> dict[str, Any]:
    return {
        "PolicyName": name,
        "ServiceNamespace": "sagemaker",
        "ResourceId": resource,
        "ScalableDimension": DIMENSION,
        "PolicyType": "TargetTrackingScaling",
        "TargetTrackingScalingPolicyConfiguration": config,
    }
