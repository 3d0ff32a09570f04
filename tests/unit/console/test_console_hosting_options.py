"""The endpoint page's status facts show how an endpoint is hosted beyond instances: a serverless variant's
ServerlessConfig and the config's AsyncInferenceConfig (output and failure paths, concurrency, notification topics)."""

from __future__ import annotations

from typing import Any

from servekit.console.pages import endpoint

TOPIC = "arn:aws:sns:us-east-1:000000000000:done"


def detail(variant: dict[str, Any], config: dict[str, Any], **endpoint_fields: Any) -> dict[str, Any]:
    return {
        "endpoint": {"EndpointName": "ep", "EndpointStatus": "InService", "ProductionVariants": [variant],
                     **endpoint_fields},
        "config": config,
    }  # fmt: skip


def test_a_serverless_variant_shows_its_config() -> None:
    current = {"MemorySizeInMB": 2048, "MaxConcurrency": 4, "ProvisionedConcurrency": 1}
    d = detail({"VariantName": "sl", "CurrentServerlessConfig": current}, {"ProductionVariants": []})
    assert endpoint.hosting_options(d) == [("Serverless (sl)", "2048 MB, max concurrency 4, provisioned concurrency 1")]
    serverless = {"MemorySizeInMB": 1024, "MaxConcurrency": 2}
    configured = {"ProductionVariants": [{"VariantName": "sl", "ServerlessConfig": serverless}]}
    html = endpoint.status_section(detail({"VariantName": "sl"}, configured))
    assert "<dt>Serverless (sl)</dt><dd>1024 MB, max concurrency 2</dd>" in html


def test_an_asynchronous_endpoint_shows_where_answers_go_and_who_is_notified() -> None:
    config = {
        "ProductionVariants": [{"VariantName": "A", "InstanceType": "ml.m5.large"}],
        "AsyncInferenceConfig": {
            "OutputConfig": {"S3OutputPath": "s3://b/out", "S3FailurePath": "s3://b/fail",
                             "NotificationConfig": {"SuccessTopic": TOPIC}},
        },
    }  # fmt: skip
    html = endpoint.status_section(detail({"VariantName": "A"}, config))
    assert "<dt>Asynchronous</dt>" in html
    for text in ("answers to s3://b/out", "failures to s3://b/fail", "4 invocation(s) at a time per instance (default)",
                 f"successes notified to {TOPIC}", "SNS is not reached"):  # fmt: skip
        assert text in html
    assert "errors notified" not in html and "Serverless" not in html
    plain = detail({"VariantName": "A"}, {"ProductionVariants": [{"VariantName": "A", "InstanceType": "ml.m5.large"}]})
    assert endpoint.hosting_options(plain) == []


def test_a_model_parallel_variant_lists_its_stage_processes() -> None:
    stages = [
        {"InstanceId": "i-1", "Stages": [
            {"Stage": 0, "InstanceId": "i-1-s0", "WeightBytes": 33554432, "Url": "http://127.0.0.1:1"},
            {"Stage": 1, "InstanceId": "i-1-s1", "WeightBytes": 16777216, "Url": "http://127.0.0.1:2"},
        ]},
    ]  # fmt: skip
    variants: list[dict[str, Any]] = [{"VariantName": "A", "ServekitPipelineStages": stages}, {"VariantName": "B"}]
    html = endpoint.stages_table(variants)
    assert "Pipeline stages" in html
    assert html.count("<tr>") - 1 == 2  # a header row, then one row per stage process
    assert "i-1-s1" in html and "16.0 MiB" in html and "32.0 MiB" in html
    assert endpoint.stages_table([{"VariantName": "B"}]) == ""
