"""The console's pure parts: escaping, each page's HTML, chart series from GetMetricData answers, periods."""

from __future__ import annotations

from urllib.parse import quote

from servekit.console import charts, data, links
from servekit.console.pages import endpoint, endpoints, jobs, monitoring, pipelines, registry, rollout
from servekit.console.render import badge, esc, json_script, table


def _summary(name: str, **endpoint: object) -> dict[str, object]:
    return {
        "endpoint": {
            "EndpointName": name,
            "EndpointStatus": "InService",
            "ProductionVariants": [
                {"VariantName": "A", "CurrentWeight": 3.0, "CurrentInstanceCount": 2, "DesiredInstanceCount": 2},
                {"VariantName": "B", "CurrentWeight": 1.0, "CurrentInstanceCount": 1, "DesiredInstanceCount": 1},
            ],
            "ServekitCostPerHour": 0.1392,
            **endpoint,
        },
        "config": {"ProductionVariants": [{"VariantName": "A", "InstanceType": "ml.t2.medium"}]},
    }


def test_every_api_string_is_escaped() -> None:
    evil = '<script>alert("x")</script>'
    out = endpoints.endpoints_table([_summary(evil, FailureReason=evil)])  # type: ignore[list-item]
    assert "<script>" not in out
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in out
    assert esc("a&b") == "a&amp;b"


def test_endpoints_table_shows_status_reason_weights_instances_types_and_cost() -> None:
    out = endpoints.endpoints_table([_summary("ep", EndpointStatus="Failed", FailureReason="model_fn raised")])  # type: ignore[list-item]
    assert "badge-bad" in out and "Failed" in out and "model_fn raised" in out
    assert "weight 3, 2/2 &times; ml.t2.medium" in out
    assert "weight 1, 1/1 &times; —" in out  # B has no instance type in the config answer
    assert "$0.139/h" in out
    assert 'href="/console/endpoints/ep"' in out


def test_names_in_links_are_url_encoded() -> None:
    assert links.endpoint_href("a/b c") == "/console/endpoints/a%2Fb%20c"


def test_badges_never_rely_on_colour_alone() -> None:
    assert ">InService<" in badge("InService") and "badge-good" in badge("InService")
    assert "badge-busy" in badge("Updating")
    assert table("Things", ("a",), []) == '<p class="empty">Things: None yet.</p>'


def test_json_for_the_page_cannot_close_its_script_tag() -> None:
    out = json_script("x", {"s": "</script><script>alert(1)</script>"})
    assert out.count("</script>") == 1


def test_periods_are_multiples_of_the_resolution_under_the_point_limit() -> None:
    assert charts.period_for(300, 1) == 1
    assert charts.period_for(3600, 1) == 10
    assert charts.period_for(900, 60) == 60
    assert charts.period_for(24 * 3600, 60) == 240
    for r in charts.RANGES_S:
        for res in (1, 2, 10, 60):
            p = charts.period_for(r, res)
            assert p % res == 0 and r / p <= charts.MAX_POINTS


def test_charts_align_series_on_every_period_rates_and_ms() -> None:
    results = [
        {"Id": "inv_0", "Timestamps": [100, 120], "Values": [40.0, 10.0]},
        {"Id": "ml50_0", "Timestamps": [120], "Values": [2500.0]},
        {"Id": "e5_0", "Timestamps": [110], "Values": [5.0]},
    ]
    by_key = {c.key: c for c in charts.build_charts(results, ["A"], 100, 130, 10)}
    inv = by_key["invocations"]
    assert inv.data[0] == (100.0, 110.0, 120.0)
    assert inv.data[1] == (4.0, 0.0, 1.0)  # Sum per period / period; no datapoint = no requests
    lat = by_key["model_latency"]
    assert lat.labels == ("A p50", "A p90", "A p99")
    assert lat.data[1] == (None, None, 2.5)  # µs to ms; no datapoint = no point, not zero
    assert by_key["errors"].data[2] == (0.0, 0.5, 0.0)


def test_queries_name_each_series_per_variant() -> None:
    qs = charts.metric_queries("ep", ["A", "B"], 60)
    ids = [q["Id"] for q in qs]
    assert len(ids) == len(set(ids)) == 2 * 9
    first = qs[0]["MetricStat"]
    assert first["Metric"]["Dimensions"] == [
        {"Name": "EndpointName", "Value": "ep"},
        {"Name": "VariantName", "Value": "A"},
    ]
    assert {q["MetricStat"]["Stat"] for q in qs} == {"Sum", "p50", "p90", "p99"}


def test_rollout_section_shows_step_bake_time_alarms_and_reasons() -> None:
    detail = {
        "endpoint": {
            "EndpointName": "ep",
            "PendingDeploymentSummary": {
                "EndpointConfigName": "v2",
                "StartTime": 1000.0,
                "ProductionVariants": [
                    {
                        "VariantName": "AllTraffic",
                        "CurrentWeight": 0.5,
                        "DesiredWeight": 1.0,
                        "CurrentInstanceCount": 1,
                        "DesiredInstanceCount": 1,
                        "VariantStatus": [
                            {"Status": "ActivatingTraffic", "StatusMessage": "Step 1 of 2: 50%", "StartTime": 1010.0}
                        ],
                    }
                ],
            },
            "LastDeploymentConfig": {
                "BlueGreenUpdatePolicy": {
                    "TrafficRoutingConfiguration": {
                        "Type": "LINEAR",
                        "WaitIntervalInSeconds": 3,
                        "LinearStepSize": {"Type": "CAPACITY_PERCENT", "Value": 50},
                    },
                    "TerminationWaitInSeconds": 2,
                },
                "AutoRollbackConfiguration": {"Alarms": [{"AlarmName": "ep-5xx"}, {"AlarmName": "gone"}]},
            },
        },
        "alarms": [{"AlarmName": "ep-5xx", "StateValue": "OK", "StateReason": "fine", "Watched": True}],
        "alarm_history": [
            {"Timestamp": 1005.0, "AlarmName": "ep-5xx", "HistorySummary": "Alarm updated from ALARM to OK"}
        ],
    }
    out = rollout.rollout_section(detail, now=1017.0)
    assert "Deploying <strong>v2</strong>" in out
    assert "Step 1 of 2: 50%" in out and "7 s in this phase" in out and "0.5 of 1" in out
    assert "ep-5xx" in out and ">OK<" in out and ">missing<" in out
    assert "Alarm updated from ALARM to OK" in out
    assert "LINEAR" in out and "50 CAPACITY_PERCENT" in out


def test_actions_appear_only_with_a_session_token() -> None:
    detail = {"endpoint": _summary("ep")["endpoint"], "config": {}}
    assert "<form" not in endpoint.variants_section(detail, None)
    with_token = endpoint.variants_section(detail, "tok")
    assert 'name="csrf" value="tok"' in with_token and 'method="post"' in with_token
    groups = [
        {
            "group": {"ModelPackageGroupName": "g"},
            "packages": [
                {
                    "ModelPackageArn": "arn:x/g/1",
                    "ModelPackageVersion": 1,
                    "ModelApprovalStatus": "PendingManualApproval",
                }
            ],
        }
    ]
    assert "Approve" not in registry.registry_body(groups, None)
    assert 'value="arn:x/g/1"' in registry.registry_body(groups, "tok")


def test_the_stop_form_offers_only_the_alarms_the_running_deployment_watches() -> None:
    endpoint = {
        "EndpointName": "ep",
        "PendingDeploymentSummary": {"EndpointConfigName": "v2"},
        "LastDeploymentConfig": {"AutoRollbackConfiguration": {"Alarms": [{"AlarmName": "guard"}]}},
    }
    alarms = [{"AlarmName": "guard", "Watched": True}, {"AlarmName": "mine", "Watched": False}]
    out = rollout.stop_rollout_form({"endpoint": endpoint, "alarms": alarms}, "tok")
    assert 'value="guard"' in out and "mine" not in out
    section = rollout.rollout_section({"endpoint": endpoint, "alarms": alarms}, now=0.0, csrf="tok")
    assert "Deployment configuration of this rollout" in section and "no (on this endpoint" in section
    unguarded = rollout.stop_rollout_form({"endpoint": endpoint, "alarms": alarms[1:]}, "tok")
    assert "<form" not in unguarded and "unavailable" in unguarded
    assert rollout.stop_rollout_form({"endpoint": {"EndpointName": "ep"}, "alarms": alarms}, "tok") == ""


def test_alarms_of_an_endpoint_are_the_watched_ones_and_those_on_its_metrics() -> None:
    def alarm(name: str, endpoint: str) -> dict[str, object]:
        return {"AlarmName": name, "Dimensions": [{"Name": "EndpointName", "Value": endpoint}]}

    picked = data.endpoint_alarms(
        [alarm("other", "x"), alarm("mine", "ep"), alarm("guard", "x"), {"AlarmName": "bare"}], "ep", ["guard"]
    )
    assert [(a["AlarmName"], a["Watched"]) for a in picked] == [("guard", True), ("mine", False)]


def test_transform_table_shows_progress_errors_and_servekits_own_status() -> None:
    job = {
        "TransformJobName": "<b>scores</b>",
        "TransformJobStatus": "Completed",
        "ServekitStatus": "CompletedWithErrors",
        "FailureReason": "2 record(s) failed",
        "CreationTime": 0,
        "ServekitProgress": {"ObjectsTotal": 4, "ObjectsDone": 3, "ObjectsFailed": 1, "Records": 12, "RecordErrors": 2},
    }
    out = jobs.transform_table([job])
    assert "<b>" not in out and "&lt;b&gt;scores&lt;/b&gt;" in out
    assert '<progress max="4" value="3"' in out and "3 / 4" in out and "1 failed" in out
    assert ">CompletedWithErrors<" in out and "SageMaker: Completed" in out and "2 record(s) failed" in out
    assert "1970-01-01 00:00:00 UTC" in out
    counting = jobs.transform_table([{**job, "ServekitProgress": {"ObjectsTotal": 0}}])
    assert "<progress" not in counting and "counting objects" in counting
    assert "none yet" in jobs.transform_table([])


def test_execution_section_shows_steps_cache_hits_and_failure_reasons() -> None:
    arn = "arn:aws:sagemaker:us-east-1:000000000000:pipeline/words/execution/abc"
    found = {
        "execution": {"PipelineExecutionArn": arn, "PipelineExecutionStatus": "Failed", "FailureReason": "<boom>"},
        "steps": [
            {"StepName": "write", "StepStatus": "Succeeded", "StartTime": 10.0, "EndTime": 12.5, "AttemptCount": 1,
             "CacheHitResult": {"SourcePipelineExecutionArn": arn.replace("abc", "first")}},
            {"StepName": "count", "StepStatus": "Failed", "StartTime": 13.0, "FailureReason": "exit status 3"},
        ],
    }  # fmt: skip
    out = pipelines.execution_section(found)
    assert "&lt;boom&gt;" in out and "badge-bad" in out
    assert "2.5 s" in out and "exit status 3" in out
    assert 'hit, from <a href="/console/pipelines/execution?arn=arn%3Aaws' in out and ">first</a>" in out
    assert ">no<" in out  # the second step ran


def test_pipelines_table_links_each_execution_and_says_when_none_ran() -> None:
    found = [
        {"pipeline": {"PipelineName": "words"}, "executions": [
            {"PipelineExecutionArn": "arn:x/execution/e1", "PipelineExecutionDisplayName": "execution-e1",
             "PipelineExecutionStatus": "Executing", "StartTime": 0}]},
        {"pipeline": {"PipelineName": "idle"}, "executions": []},
    ]  # fmt: skip
    out = pipelines.pipelines_table(found)
    assert '<a href="/console/pipelines/execution?arn=arn%3Ax%2Fexecution%2Fe1">execution-e1</a>' in out
    assert "badge-busy" in out and "Executions of idle (newest first): never run." in out
    assert "No pipelines yet" in pipelines.pipelines_table([])


def test_instance_charts_align_counts_and_mark_the_variants_activities_in_range() -> None:
    results = [
        {"Id": "idc_0", "Timestamps": [100, 110, 120], "Values": [1.0, 2.0, 2.0]},
        {"Id": "icc_0", "Timestamps": [100, 110, 120], "Values": [1.0, 1.0, 2.0]},
    ]
    activities = [
        {"ResourceId": "endpoint/ep/variant/A", "StartTime": 112.0, "Description": "to 2", "StatusCode": "Successful"},
        {"ResourceId": "endpoint/ep/variant/B", "StartTime": 113.0, "Description": "other variant"},
        {"ResourceId": "endpoint/ep/variant/A", "StartTime": 5.0, "Description": "before the range"},
    ]
    (chart,) = charts.instance_charts(results, ["A"], activities, "ep", 100, 140, 10)
    assert chart.key == "instances-A" and chart.labels == ("desired", "current")
    assert chart.data == ((100.0, 110.0, 120.0, 130.0), (1.0, 2.0, 2.0, None), (1.0, 1.0, 2.0, None))
    assert chart.marks == ({"t": 112.0, "label": "to 2", "status": "Successful"},)
    assert chart.as_json()["marks"] == chart.marks
    queries = charts.instance_queries("ep", ["A"], 10)
    assert [q["Id"] for q in queries] == ["idc_0", "icc_0"]
    assert {q["MetricStat"]["Metric"]["Namespace"] for q in queries} == {"servekit/Endpoints"}


def test_drift_section_says_each_verdict_in_words_and_lists_the_latest_violations() -> None:
    def run(at: float, x_drifted: bool, violations: list[dict[str, str]]) -> dict[str, object]:
        features = {
            "x": {"drifted": x_drifted, "metrics": {"ks_pvalue": 0.001}, "thresholds": {"ks_pvalue": 0.005}},
            "y": {"drifted": False, "metrics": {"ks_pvalue": 0.4}, "thresholds": {}},
        }
        return {
            "execution": {"ScheduledTime": at, "MonitoringExecutionStatus": "CompletedWithViolations"},
            "job": f"job-{at:g}",
            "local": True,
            "window": {"end": "2026-01-01T00:00:00Z", "features": features},
            "violations": violations,
            "report": True,
        }

    drift = {"feature_name": "x", "constraint_check_type": "baseline_drift_check", "description": "<moved>"}
    found = {"runs": [run(0, False, []), run(3600, True, [drift]), {**run(7200, False, []), "window": None}]}
    out = monitoring.drift_section("churn", {**found, "features": ["x", "y"]})
    assert '<th scope="col" title="1970-01-01 00:00:00 UTC">00:00:00</th>' in out
    assert '<th scope="row">x</th><td class="cell-ok"' in out and "✗</span> drifted" in out
    assert "x drifted in the window ending 2026-01-01T00:00:00Z: ks_pvalue 0.001 (thresholds ks_pvalue 0.005)" in out
    assert '<td class="cell-none" title="no judged window">—</td>' in out
    assert "baseline_drift_check" in out and "&lt;moved&gt;" in out and "scheduled 1970-01-01 01:00:00 UTC" in out
    assert 'href="/console/monitoring/report?job=job-3600&amp;file=report.html"' in out


def test_quality_chart_has_one_point_per_judged_execution_with_the_problem_types_metrics() -> None:
    def run(t: float, accuracy: float | None, f1: float | None, status: str = "ok") -> dict[str, object]:
        window = {"status": status, "labelled": 30, "metrics": {"accuracy": accuracy, "f1_macro": f1, "auc": 0.5}}
        return {
            "execution": {"ScheduledTime": t, "MonitoringExecutionStatus": "Completed"},
            "job": f"job-{t:.0f}",
            "local": True,
            "problem_type": "MulticlassClassification",
            "window": window if status == "ok" else None,
            "violations": [{"description": "Metric accuracy with 0.8 was LessThanThreshold 0.99"}] if t > 1 else [],
            "report": False,
        }

    runs = [run(1.0, 0.9, 0.85), run(2.0, 0.8, None), run(3.0, None, None, status="insufficient")]
    chart = charts.quality_chart("iris", "MulticlassClassification", runs)
    assert chart.labels == ("accuracy", "f1_macro") and chart.unit == "score"
    assert chart.data == ((1.0, 2.0), (0.9, 0.8), (0.85, None))  # a missing metric is a gap, not a zero
    regression = charts.quality_chart("house", "Regression", [{**runs[0], "problem_type": "Regression"}])
    assert regression.labels == ("mae", "rmse") and regression.unit == "error"
    found = {"runs": runs, "problem_type": "MulticlassClassification", "metrics": chart.labels, "chart": chart}
    out = monitoring.quality_section("iris", found)
    assert "data-charts=" in out and "&quot;quality-iris&quot;" in out  # the chart's JSON, escaped in its attribute
    assert "<td>0.8</td>" in out and "LessThanThreshold 0.99" in out and "quality_metrics.json" in out
    assert "no judged window" in monitoring.quality_section("iris", {**found, "chart": None})


def test_lineage_names_the_producing_execution_its_registering_step_and_the_serving_endpoints() -> None:
    execution = "arn:aws:sagemaker:us-east-1:000000000000:pipeline/trainer/execution/abc123"
    package = {
        "ModelPackageArn": "arn:aws:sagemaker:us-east-1:000000000000:model-package/churn/2",
        "InferenceSpecification": {"Containers": [{"ModelDataUrl": "file:///runs/abc123/train/model"}]},
        "MetadataProperties": {"GeneratedBy": execution},
    }
    lineage = {
        "generated_by": execution,
        "run": {
            "PipelineArn": "arn:aws:sagemaker:us-east-1:000000000000:pipeline/trainer",
            "PipelineExecutionStatus": "Succeeded",
            "CreationTime": 0,
        },
        "steps": [
            {"StepName": "train", "StepStatus": "Succeeded", "EndTime": 5.0},
            {
                "StepName": "register",
                "StepStatus": "Succeeded",
                "Metadata": {"RegisterModel": {"Arn": package["ModelPackageArn"].upper()}},  # ARNs match by case
            },
        ],
        "endpoints": [
            {
                "EndpointName": "<churn>",
                "EndpointStatus": "InService",
                "EndpointConfigName": "c",
                "VariantName": "A",
                "ModelName": "m",
                "MatchedBy": "ModelPackageName",
            }
        ],
    }
    out = registry.package_body(package, lineage)
    assert "/console/pipelines/execution?arn=" + quote(execution, safe="") in out and ">abc123</a>" in out
    assert "<dd>trainer</dd>" in out and "file:///runs/abc123/train/model" in out
    assert "registered this version" in out and "&lt;churn&gt;" in out and "ModelPackageName" in out
    alone = registry.lineage_section({**package, "MetadataProperties": {}}, {"endpoints": []})
    assert "Not produced by a pipeline" in alone and "Endpoints serving this version now: none." in alone
    elsewhere = registry.lineage_section(package, {"generated_by": "training-job/x", "run_error": "", "endpoints": []})
    assert "Generated by training-job/x" in elsewhere
