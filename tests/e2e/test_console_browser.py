"""The web console in a real browser (Debian's Chromium driven by Playwright) against a real ``servekit up`` with
two endpoints, live traffic and a linear rollout in progress: pages load without console errors, charts draw
datapoints that match CloudWatch's API, values match DescribeEndpoint, new traffic shows without a reload, and an
action without a session or without its CSRF token is refused. Each page's screenshot is saved under
``$SERVEKIT_CONSOLE_SCREENSHOTS`` (default: a directory of the test run, printed).

Run with ``make test-browser`` (``pytest -m browser``); skipped when Playwright or Chromium is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from servekit.aws import Credentials
from servekit.console.logview import log_time
from servekit.testing.hosting import UpProcess, scaling_model

pytestmark = [pytest.mark.e2e, pytest.mark.browser]
CHROMIUM = os.environ.get("SERVEKIT_CHROMIUM", "/usr/bin/chromium")
if os.environ.get("SERVEKIT_REQUIRE_BROWSER"):  # make test-browser: a missing browser is a failure, not a skip
    from playwright import sync_api
else:
    sync_api = pytest.importorskip("playwright.sync_api", reason="make test-browser installs Playwright")
if not Path(CHROMIUM).exists() and not os.environ.get("SERVEKIT_REQUIRE_BROWSER"):
    pytest.skip(f"no Chromium at {CHROMIUM} (make test-browser installs Debian's)", allow_module_level=True)

FAST = {"Delay": 1, "MaxAttempts": 180}
WIDTH = 1280


def variant(name: str, model: str, weight: float) -> dict[str, Any]:
    return {
        "VariantName": name,
        "ModelName": model,
        "InitialInstanceCount": 1,
        "InstanceType": "ml.t2.medium",
        "InitialVariantWeight": weight,
    }


class Load:
    """InvokeEndpoint from a thread until stopped (the rollout endpoint's live traffic)."""

    def __init__(self, up: UpProcess, endpoint: str) -> None:
        self.count = 0
        self._stop = threading.Event()
        self._up, self._endpoint = up, endpoint
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        rt = self._up.rt()
        while not self._stop.is_set():
            rt.invoke_endpoint(EndpointName=self._endpoint, Body=b"[1.0]", ContentType="application/json")
            self.count += 1
            self._stop.wait(0.05)  # pacing the load, not synchronisation

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = os.environ.get("SERVEKIT_CONSOLE_SCREENSHOTS")
    path = Path(where) if where else tmp_path_factory.mktemp("console-screenshots")
    path.mkdir(parents=True, exist_ok=True)
    print(f"console screenshots: {path}")
    return path


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    root = tmp_path_factory.mktemp("console")
    u = UpProcess(root / "home", "--metrics-resolution-s", "1")
    u.start()
    load: Load | None = None
    try:
        sm, cw = u.sm(), u.client("cloudwatch")
        for name, factor in (("m1", 1.0), ("m2", 2.0)):
            path = scaling_model(root / "models", name, factor)
            sm.create_model(ModelName=name, PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(path)})
        sm.create_endpoint_config(
            EndpointConfigName="shop-ab", ProductionVariants=[variant("A", "m1", 3.0), variant("B", "m2", 1.0)]
        )
        sm.create_endpoint_config(EndpointConfigName="fraud-v1", ProductionVariants=[variant("AllTraffic", "m1", 1)])
        sm.create_endpoint_config(EndpointConfigName="fraud-v2", ProductionVariants=[variant("AllTraffic", "m2", 1)])
        sm.create_endpoint(EndpointName="shop", EndpointConfigName="shop-ab")
        sm.create_endpoint(EndpointName="fraud", EndpointConfigName="fraud-v1")
        for name in ("shop", "fraud"):
            sm.get_waiter("endpoint_in_service").wait(EndpointName=name, WaiterConfig=FAST)
        cw.put_metric_alarm(
            AlarmName="fraud-5xx",
            Namespace="AWS/SageMaker",
            MetricName="Invocation5XXErrors",
            Dimensions=[{"Name": "EndpointName", "Value": "fraud"}, {"Name": "VariantName", "Value": "AllTraffic"}],
            Statistic="Sum",
            Period=10,
            EvaluationPeriods=1,
            Threshold=0,
            ComparisonOperator="GreaterThanThreshold",
            TreatMissingData="notBreaching",
        )
        u.client("application-autoscaling").register_scalable_target(
            ServiceNamespace="sagemaker",
            ResourceId="endpoint/shop/variant/B",
            ScalableDimension="sagemaker:variant:DesiredInstanceCount",
            MinCapacity=1,
            MaxCapacity=2,
        )
        load = Load(u, "fraud")
        load.start()
        sm.update_endpoint(
            EndpointName="fraud",
            EndpointConfigName="fraud-v2",
            DeploymentConfig={
                "BlueGreenUpdatePolicy": {
                    "TrafficRoutingConfiguration": {
                        "Type": "LINEAR",
                        "WaitIntervalInSeconds": 900,  # the first step lasts the whole test: a rollout in progress
                        "LinearStepSize": {"Type": "CAPACITY_PERCENT", "Value": 50},
                    },
                    "TerminationWaitInSeconds": 5,
                },
                "AutoRollbackConfiguration": {"Alarms": [{"AlarmName": "fraud-5xx"}]},
            },
        )
        wait_for(lambda: step_of(sm.describe_endpoint(EndpointName="fraud")) == "ActivatingTraffic", 120)
        rt = u.rt()
        for _ in range(30):
            rt.invoke_endpoint(EndpointName="shop", Body=b"[1.0]", ContentType="application/json")
        yield u
    finally:
        if load is not None:
            load.stop()
        u.stop()


def describe_raw(up: UpProcess, name: str) -> dict[str, Any]:
    """DescribeEndpoint's JSON as sent (botocore's parser drops servekit's extension fields, ServekitCostPerHour)."""
    sm, seen = up.sm(), []
    sm.meta.events.register(
        "after-call.sagemaker.DescribeEndpoint", lambda http_response, **_: seen.append(http_response.content)
    )
    sm.describe_endpoint(EndpointName=name)
    doc: dict[str, Any] = json.loads(seen[-1])
    return doc


def step_of(described: dict[str, Any]) -> str:
    variants = described.get("PendingDeploymentSummary", {}).get("ProductionVariants", [])
    return str(variants[0].get("VariantStatus", [{}])[0].get("Status", "")) if variants else ""


def wait_for(condition: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)  # polling another process's progress
    raise AssertionError("condition not met in time")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()


class Page:
    """A fresh browser context (no cookies) at laptop width, recording console errors and failed requests."""

    def __init__(self, browser: Any, up: UpProcess, shots: Path) -> None:
        self.context = browser.new_context(viewport={"width": WIDTH, "height": 900}, base_url=up.url)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.shots = shots

    def open(self, path: str) -> Any:
        response = self.page.goto(path)
        assert response is not None and response.status == 200, path
        return self.page

    def shot(self, name: str) -> None:
        self.page.screenshot(path=str(self.shots / f"{name}.png"), full_page=True)

    def polled(self, at_least: int = 1) -> None:
        # functions, not expression strings: Playwright polls a string with eval, which the console's CSP forbids
        self.page.wait_for_function(
            "(n) => window.servekitConsole && window.servekitConsole.updates >= n", arg=at_least
        )


@pytest.fixture
def tab(browser: Any, up: UpProcess, shots: Path) -> Iterator[Page]:
    p = Page(browser, up, shots)
    try:
        yield p
        assert p.errors == [], p.errors
    finally:
        p.context.close()


def sign_in(tab: Page, up: UpProcess, next_path: str) -> None:
    admin = Credentials.load(up.home).admin
    page = tab.open(f"/console/login?next={next_path}")
    page.get_by_label("Access key id").fill(admin.access_key_id)
    page.get_by_label("Secret access key").fill(admin.secret_access_key)
    page.get_by_label("Secret access key").press("Enter")  # the keyboard submits the form
    page.wait_for_url(f"**{next_path}*")
    assert page.get_by_text("Signed in as").is_visible()


def test_endpoints_page_matches_describe_endpoint(tab: Page, up: UpProcess) -> None:
    page = tab.open("/console/")
    tab.polled()
    for name in ("shop", "fraud"):
        described = describe_raw(up, name)
        row = page.locator("tr", has=page.get_by_role("link", name=name, exact=True))
        assert described["EndpointStatus"] in row.inner_text()
        assert f"${described['ServekitCostPerHour']:,.3f}/h" in row.inner_text()
        for v in described["ProductionVariants"]:
            item = row.locator(f'li[data-variant="{v["VariantName"]}"]').inner_text()
            assert f"weight {v['CurrentWeight']:g}" in item and "ml.t2.medium" in item
    fraud = page.locator("tr", has=page.get_by_role("link", name="fraud", exact=True)).inner_text()
    assert "Rollout to fraud-v2: Step 1 of 2" in fraud
    tab.shot("endpoints")


def test_endpoint_charts_draw_the_metrics_api_datapoints_and_update_live(tab: Page, up: UpProcess) -> None:
    page = tab.open("/console/endpoints/shop?range=300")
    tab.polled()
    # four traffic charts and, per variant (A, B), desired vs current instances
    page.wait_for_function("() => Object.keys(window.servekitConsole.charts).length === 6")
    # the comparison below reads settled periods (3 s old): wait until the setup's requests are in one
    page.wait_for_function(
        "() => { const p = window.servekitConsole.last; const d = p.charts[0].data;"
        " return d[0].some((t, i) => t <= p.now - 3 && d[1][i] + d[2][i] > 0); }"
    )
    assert page.locator("#charts .uplot canvas").count() == 4
    assert page.locator("#scaling-charts .uplot canvas").count() == 2
    payload = page.evaluate("window.servekitConsole.last")
    charts = {c["key"]: c for c in payload["charts"]}
    period = payload["period"]
    assert period == 1
    xs, a, b = charts["invocations"]["data"]
    assert charts["invocations"]["labels"] == ["A", "B"]
    assert sum(a) + sum(b) > 0  # the chart has datapoints
    # every complete period of the chart is CloudWatch's answer for the same period
    settled = [i for i, t in enumerate(xs) if t <= payload["now"] - 3]
    start, end = xs[settled[0]], xs[settled[-1]] + period
    cw = up.client("cloudwatch")
    answer = cw.get_metric_data(
        MetricDataQueries=[
            {
                "Id": f"q{i}",
                "MetricStat": {
                    "Metric": {
                        "Namespace": "AWS/SageMaker",
                        "MetricName": metric,
                        "Dimensions": [
                            {"Name": "EndpointName", "Value": "shop"},
                            {"Name": "VariantName", "Value": "A"},
                        ],
                    },
                    "Period": period,
                    "Stat": stat,
                },
            }
            for i, (metric, stat) in enumerate((("Invocations", "Sum"), ("ModelLatency", "p99")))
        ],
        StartTime=start,
        EndTime=end,
        ScanBy="TimestampAscending",
    )
    results = {r["Id"]: r for r in answer["MetricDataResults"]}
    invocations = {
        int(t.timestamp()): v for t, v in zip(results["q0"]["Timestamps"], results["q0"]["Values"], strict=True)
    }
    assert sum(invocations.values()) > 0
    assert [a[i] * period for i in settled] == [invocations.get(int(xs[i]), 0.0) for i in settled]
    p99 = {int(t.timestamp()): v for t, v in zip(results["q1"]["Timestamps"], results["q1"]["Values"], strict=True)}
    chart_p99 = charts["model_latency"]["data"][3]  # A p50, A p90, A p99, B ...
    for i in settled:
        expected = p99.get(int(xs[i]))
        assert (chart_p99[i] is None) == (expected is None)
        if expected is not None:
            assert chart_p99[i] == pytest.approx(expected / 1000, abs=1e-4)
    tab.shot("endpoint-shop")

    # new traffic shows in the same page (no reload) within a few seconds
    page.evaluate("window.notReloaded = true")
    before = sum(charts["invocations"]["data"][1]) + sum(charts["invocations"]["data"][2])
    rt = up.rt()
    for _ in range(25):
        rt.invoke_endpoint(EndpointName="shop", Body=b"[2.0]", ContentType="application/json")
    page.wait_for_function(
        "(n) => { const d = window.servekitConsole.charts.invocations.data;"
        " return d[1].reduce((s, v) => s + v, 0) + d[2].reduce((s, v) => s + v, 0) >= n; }",
        arg=before + 25,
        timeout=15_000,
    )
    assert page.evaluate("window.notReloaded") is True


def test_autoscaling_section_shows_the_scalable_targets_bounds_and_counts(tab: Page, up: UpProcess) -> None:
    page = tab.open("/console/endpoints/shop")
    target = up.client("application-autoscaling").describe_scalable_targets(
        ServiceNamespace="sagemaker", ResourceIds=["endpoint/shop/variant/B"]
    )["ScalableTargets"][0]
    b = {v["VariantName"]: v for v in up.sm().describe_endpoint(EndpointName="shop")["ProductionVariants"]}["B"]
    row = page.locator('[data-live="autoscaling"] tr', has_text="B").inner_text().split("\t")
    expected = [target["MinCapacity"], target["MaxCapacity"], b["DesiredInstanceCount"], b["CurrentInstanceCount"]]
    assert row == ["B", *(str(x) for x in expected)]


def test_rollout_in_progress_shows_step_alarms_and_matches_describe(tab: Page, up: UpProcess) -> None:
    page = tab.open("/console/endpoints/fraud?range=300")
    tab.polled()
    described = up.sm().describe_endpoint(EndpointName="fraud")
    pending = described["PendingDeploymentSummary"]
    rollout = page.locator('[data-live="rollout"]')
    text = rollout.inner_text()
    assert f"Deploying {pending['EndpointConfigName']}" in text
    status = pending["ProductionVariants"][0]["VariantStatus"][0]
    assert status["Status"] in text and status["StatusMessage"] in text
    assert "fraud-5xx" in text
    alarm = up.client("cloudwatch").describe_alarms(AlarmNames=["fraud-5xx"])["MetricAlarms"][0]
    alarms = rollout.locator("table", has_text="Alarms the rollout watches")
    assert alarm["StateValue"] in alarms.locator("tr", has_text="fraud-5xx").inner_text()
    # fraud's first guarded deployment: DescribeEndpoint names it (LastDeploymentConfig) while it runs, and the
    # section shows exactly its alarms as watched
    assert described["LastDeploymentConfig"]["AutoRollbackConfiguration"]["Alarms"] == [{"AlarmName": "fraud-5xx"}]
    assert "Deployment configuration of this rollout" in text and "LINEAR" in text
    cells = [r.locator("td").all_inner_texts() for r in alarms.locator("tbody tr").all()]
    assert [c[0] for c in cells if c[3] == "yes"] == ["fraud-5xx"], cells
    page.wait_for_function("() => window.servekitConsole.charts.invocations.data[1].some((v) => v > 0)")
    tab.shot("endpoint-fraud-rollout")


def test_actions_are_refused_without_a_session_or_its_csrf_token(tab: Page, up: UpProcess) -> None:
    page = tab.open("/console/endpoints/shop")
    assert page.locator("form.action").count() == 0  # nothing to act with while signed out
    refused = tab.context.request.post(
        "/console/endpoints/shop/weights", form={"weight:A": "1", "weight:B": "1"}, max_redirects=0
    )
    assert refused.status == 401
    sign_in(tab, up, "/console/endpoints/shop")
    form = page.locator("form.action")
    assert form.count() == 1
    no_token = tab.context.request.post(
        "/console/endpoints/shop/weights", form={"weight:A": "1", "weight:B": "1"}, max_redirects=0
    )
    assert no_token.status == 403
    weights = {
        v["VariantName"]: v["DesiredWeight"]
        for v in up.sm().describe_endpoint(EndpointName="shop")["ProductionVariants"]
    }
    assert weights == {"A": 3.0, "B": 1.0}  # neither refused call changed anything
    tab.shot("endpoint-shop-signed-in")
    page.get_by_label("B", exact=True).fill("3")
    page.get_by_role("button", name="Apply weights").click()
    page.wait_for_url("**flash=*")
    assert "Weights submitted" in page.get_by_role("status").inner_text()
    wait_for(
        lambda: (
            {
                v["VariantName"]: v["CurrentWeight"]
                for v in up.sm().describe_endpoint(EndpointName="shop")["ProductionVariants"]
            }
            == {"A": 3.0, "B": 3.0}
        ),
        60,
    )


def test_registry_approval_through_the_console_records_the_signed_in_key(
    tab: Page, up: UpProcess, tmp_path: Path
) -> None:
    sm = up.sm()
    sm.create_model_package_group(ModelPackageGroupName="churn", ModelPackageGroupDescription="churn models")
    arn = sm.create_model_package(
        ModelPackageGroupName="churn",
        InferenceSpecification={
            "Containers": [{"Image": "servekit", "ModelDataUrl": str(scaling_model(tmp_path, "c1", 1.0))}],
            "SupportedContentTypes": ["application/json"],
            "SupportedResponseMIMETypes": ["application/json"],
        },
        ModelApprovalStatus="PendingManualApproval",
    )["ModelPackageArn"]
    page = tab.open("/console/registry")
    assert "PendingManualApproval" in page.locator("table").inner_text()
    assert page.get_by_role("button", name="Approve version 1 of churn").count() == 0
    tab.shot("registry")
    sign_in(tab, up, "/console/registry")
    page.get_by_role("button", name="Approve version 1 of churn").click()
    page.wait_for_url("**/console/registry/package*")
    described = sm.describe_model_package(ModelPackageName=arn)
    assert described["ModelApprovalStatus"] == "Approved"
    admin = Credentials.load(up.home).admin
    history = page.locator("table", has_text="Approval history").inner_text()
    assert "Approved" in history and admin.access_key_id in history
    tab.shot("model-package")


COPIER = "import os, shutil, sys; shutil.copytree(sys.argv[1], os.environ['SERVEKIT_OUTPUT_MODEL'], dirs_exist_ok=True)"


def test_a_deployed_packages_lineage_names_its_pipeline_run_and_the_endpoints_serving_it(
    tab: Page, up: UpProcess, tmp_path: Path
) -> None:
    """A pipeline trains (copies a model into its output) and registers an approved version; an endpoint serves a
    model made from that package. The version's page shows the execution that produced it (linking its steps page),
    the step that registered it, its model data, and the endpoint, as the public API says."""
    sm = up.sm()
    source = scaling_model(tmp_path, "trained", 3.0)
    trainer = {
        "Name": "trainer",
        "Steps": [
            {
                "Name": "train",
                "Type": "Processing",
                "Command": [sys.executable, "-c", COPIER, str(source)],
                "Outputs": ["model"],
                # what the step reads, declared: a step servekit up runs sees only that (its sandbox)
                "Reads": [str(source)],
            },
            {
                "Name": "register",
                "Type": "RegisterModel",
                "Arguments": {
                    "ModelPackageGroupName": "trained",
                    "ModelDataUrl": {"Get": "Steps.train.Outputs.model"},
                    "ModelApprovalStatus": "Approved",
                },
            },
        ],
    }
    sm.create_pipeline(
        PipelineName="trainer",
        PipelineDefinition=json.dumps(trainer),
        RoleArn="arn:aws:iam::000000000000:role/pipelines",
        ClientRequestToken="create-trainer".ljust(32, "0"),
    )
    execution = sm.start_pipeline_execution(PipelineName="trainer", ClientRequestToken="trainer-1".ljust(32, "0"))[
        "PipelineExecutionArn"
    ]
    done = poll_until(
        lambda: sm.describe_pipeline_execution(PipelineExecutionArn=execution),
        lambda d: d["PipelineExecutionStatus"] != "Executing",
    )
    assert done["PipelineExecutionStatus"] == "Succeeded", done
    steps = sm.list_pipeline_execution_steps(PipelineExecutionArn=execution, SortOrder="Ascending")[
        "PipelineExecutionSteps"
    ]
    package = next(s for s in steps if s["StepName"] == "register")["Metadata"]["RegisterModel"]["Arn"]
    described = sm.describe_model_package(ModelPackageName=package)
    assert described["MetadataProperties"]["GeneratedBy"] == execution
    sm.create_model(ModelName="trained-m", Containers=[{"ModelPackageName": package}])
    sm.create_endpoint_config(EndpointConfigName="trained-cfg", ProductionVariants=[variant("A", "trained-m", 1.0)])
    sm.create_endpoint(EndpointName="trained", EndpointConfigName="trained-cfg")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="trained", WaiterConfig=FAST)

    page = tab.open("/console/registry")
    group = page.locator("section", has=page.get_by_role("heading", name="trained", exact=True))
    group.get_by_role("link", name="version 1").click()
    page.wait_for_url("**/console/registry/package*")
    lineage = page.locator("section", has=page.get_by_role("heading", name="Lineage"))
    facts = lineage.locator("dl").inner_text()
    assert "trainer" in facts and done["PipelineExecutionStatus"] in facts
    assert described["InferenceSpecification"]["Containers"][0]["ModelDataUrl"] in facts
    rows = lineage.locator("table", has_text="Steps of the producing execution").locator("tbody tr")
    assert [r.locator("td").first.inner_text() for r in rows.all()] == [s["StepName"] for s in steps]
    assert "registered this version" in rows.filter(has_text="register").inner_text()
    serving = lineage.locator("table", has_text="Endpoints serving this version now").locator("tbody tr")
    cells = serving.locator("td").all_inner_texts()
    endpoint = sm.describe_endpoint(EndpointName="trained")
    assert cells == ["trained", endpoint["EndpointStatus"], "trained-cfg", "A", "trained-m", "ModelPackageName"]
    tab.shot("model-package-lineage")
    lineage.get_by_role("link", name=execution.rsplit("/", 1)[-1]).click()  # to the producing execution's steps
    page.wait_for_url("**/console/pipelines/execution?arn=*")
    assert "register" in page.locator("table", has_text="Steps").inner_text()
    sm.delete_endpoint(EndpointName="trained")  # its instance is not needed by the tests after this one


def raw_answer(client: Any, event: str, call: Callable[[], Any]) -> dict[str, Any]:
    """An operation's JSON as sent (botocore's parser drops servekit's extension fields)."""
    seen: list[bytes] = []
    client.meta.events.register(f"after-call.{event}", lambda http_response, **_: seen.append(http_response.content))
    call()
    doc: dict[str, Any] = json.loads(seen[-1])
    return doc


def test_batch_jobs_page_shows_a_transform_jobs_progress_live(tab: Page, up: UpProcess, tmp_path: Path) -> None:
    sm = up.sm()
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text("[1.0]\n[2.0]\n")
    (tmp_path / "in" / "b.jsonl").write_text("[3.0]\n")
    page = tab.open("/console/")
    page.get_by_role("link", name="Batch jobs").click()  # reachable from the navigation
    page.wait_for_url("**/console/jobs")
    tab.polled()
    sm.create_transform_job(
        TransformJobName="scores",
        ModelName="m1",
        TransformInput={
            "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": str(tmp_path / "in")}},
            "ContentType": "application/json",
            "SplitType": "Line",
        },
        TransformOutput={"S3OutputPath": str(tmp_path / "out"), "AssembleWith": "Line"},
        TransformResources={"InstanceType": "ml.m5.large", "InstanceCount": 1},
    )
    sm.get_waiter("transform_job_completed_or_stopped").wait(TransformJobName="scores", WaiterConfig=FAST)
    row = page.locator("tr", has=page.locator('[data-job="scores"]'))
    row.get_by_text("Completed").wait_for()  # the list refreshed itself: no reload
    described = raw_answer(
        sm, "sagemaker.DescribeTransformJob", lambda: sm.describe_transform_job(TransformJobName="scores")
    )
    progress = described["ServekitProgress"]
    assert (progress["ObjectsDone"], progress["ObjectsTotal"], progress["Records"]) == (2, 2, 3)
    cells = row.locator("td").all_inner_texts()
    assert cells[1].startswith(described["TransformJobStatus"])
    assert cells[2].strip() == "2 / 2"
    assert cells[3:5] == ["3", "0"]
    assert row.get_by_role("progressbar", name="Objects done of scores").get_attribute("value") == "2"
    tab.shot("batch-jobs")


def test_a_training_job_shows_live_on_the_list_and_its_page_charts_its_metric(tab: Page, up: UpProcess) -> None:
    """A script-mode training job (the training e2e tests' own request): the list shows it Completed without a
    reload, and its page draws the metric's values as the job's log lines say them."""
    from tests.e2e.test_training_jobs import TRAIN, clients, job

    sm, s3, logs = clients(up)
    page = tab.open("/console/")
    page.get_by_role("link", name="Training", exact=True).click()  # reachable from the navigation
    page.wait_for_url("**/console/training")
    tab.polled()
    sm.create_training_job(**job(s3, "browser-fit", TRAIN))
    sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="browser-fit", WaiterConfig=FAST)
    row = page.locator("tr", has=page.locator('[data-job="browser-fit"]'))
    row.get_by_text("Completed", exact=True).wait_for()  # the list refreshed itself: no reload
    assert "validation:accuracy = 0.91" in row.inner_text()
    row.get_by_role("link", name="browser-fit").click()
    page.wait_for_url("**/console/training/browser-fit")
    key = "metric:validation:accuracy"
    page.wait_for_function("(k) => !!window.servekitConsole.charts[k]", arg=key)
    group = "/aws/sagemaker/TrainingJobs"
    matched = [e for e in stream_events(logs, group, "browser-fit/") if "validation:accuracy=" in e[2]]
    shown = page.evaluate("(k) => window.servekitConsole.charts[k].data", key)
    assert shown[1] == [0.75, 0.91] and len(matched) == 2
    assert [log_time(round(t * 1000)) for t in shown[0]] == [t for t, _, _ in matched]  # at the lines' times
    figure = page.locator('[id="chart-metric:validation:accuracy"]')
    assert "validation:accuracy 0.91" in (figure.get_attribute("aria-label") or "")
    tab.polled()  # the job's facts refresh live
    assert "Completed" in page.locator('[data-live="job"]').inner_text()
    tab.shot("training-job")


def poll_until(what: Callable[[], Any], until: Callable[[Any], bool], timeout_s: float = 120) -> Any:
    """Call ``what`` every 0.2 s until ``until`` holds (another process's progress)."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = what()
        if until(last):
            return last
        time.sleep(0.2)
    raise AssertionError(f"still {last!r} after {timeout_s}s")


HOSTILE = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2"> loaded'


def talker(root: Path) -> Path:
    """A model whose code prints a hostile line when it loads and a line per record (stdout and stderr)."""
    version = root / "talker" / "1"
    (version / "code").mkdir(parents=True)
    (version / "code" / "inference.py").write_text(
        textwrap.dedent(
            f"""
            import json, sys

            def model_fn(model_dir):
                print({HOSTILE!r}, flush=True)
                return 1.0

            def transform_fn(model, data, content_type, accept):
                print("talker record", json.loads(data), file=sys.stderr, flush=True)
                return json.dumps({{"out": json.loads(data)}}), "application/json"
            """
        )
    )
    return root / "talker"


def stream_events(logs: Any, group: str, prefix: str = "") -> list[tuple[str, str, str]]:
    """Every event of the group's streams (of ``prefix``), read from the head with GetLogEvents' forward tokens, as
    the console shows a line: (time, stream, line); none while the group does not exist."""
    request = {"logGroupName": group, **({"logStreamNamePrefix": prefix} if prefix else {})}
    try:
        streams = logs.describe_log_streams(**request)["logStreams"]
    except logs.exceptions.ResourceNotFoundException:
        return []
    out = []
    for s in streams:
        token = None
        while True:
            kwargs: dict[str, Any] = {"nextToken": token} if token else {"startFromHead": True}
            got = logs.get_log_events(logGroupName=group, logStreamName=s["logStreamName"], **kwargs)
            out += [(log_time(e["timestamp"]), s["logStreamName"], e["message"].rstrip("\r\n")) for e in got["events"]]
            if got["nextForwardToken"] == token:
                break
            token = got["nextForwardToken"]
    return out


def shown_lines(page: Any) -> list[tuple[str, str, str]]:
    """The log section's rows as text (the DOM's text: what was escaped shows as the characters sent)."""
    rows = page.locator(".logs tbody tr")
    return [tuple(c.text_content() for c in rows.nth(i).locator("td").all()) for i in range(rows.count())]


def test_a_jobs_and_an_endpoints_logs_show_as_the_logs_api_answers(tab: Page, up: UpProcess, tmp_path: Path) -> None:
    sm, logs = up.sm(), up.client("logs")
    sm.create_model(ModelName="talker", PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(talker(tmp_path))})
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text("[1.0]\n[2.0]\n")
    sm.create_transform_job(
        TransformJobName="talk",
        ModelName="talker",
        TransformInput={
            "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": str(tmp_path / "in")}},
            "ContentType": "application/json",
            "SplitType": "Line",
        },
        TransformOutput={"S3OutputPath": str(tmp_path / "out"), "AssembleWith": "Line"},
        TransformResources={"InstanceType": "ml.m5.large", "InstanceCount": 1},
        BatchStrategy="SingleRecord",
    )
    sm.get_waiter("transform_job_completed_or_stopped").wait(TransformJobName="talk", WaiterConfig=FAST)
    group = "/aws/sagemaker/TransformJobs"
    poll_until(
        lambda: stream_events(logs, group, "talk/"),
        lambda ev: sum("talker record" in line for *_, line in ev) == 2 and any(HOSTILE == e[2] for e in ev),
    )
    page = tab.open("/console/jobs")
    page.get_by_role("link", name="talk", exact=True).click()  # the list links the job's page
    page.wait_for_url("**/console/jobs/talk")
    tab.polled()  # the job's facts refresh live

    def reread() -> tuple[list[Any], list[Any]]:
        old = page.url
        page.get_by_role("link", name="Refresh logs").first.click()  # a plain link: the page again, at its logs
        page.wait_for_url(lambda url: url != old and "#h-logs" in url)
        page.wait_for_load_state()
        return shown_lines(page), stream_events(logs, group, "talk/")

    shown, _ = poll_until(reread, lambda got: sorted(got[0]) == sorted(got[1]))  # the plane may still be shipping
    assert [t for t, *_ in shown] == sorted(t for t, *_ in shown)  # in time order, the newest at the bottom
    assert all(stream.startswith("talk/") for _, stream, _ in shown)
    assert page.locator(".logs td code.line", has_text=HOSTILE).count() == 1  # the line as text, not markup
    assert page.locator(".logs script, .logs img").count() == 0
    assert page.evaluate("window.pwned === undefined")
    assert "Completed" in page.locator('[data-live="job"]').inner_text()
    tab.shot("transform-job")

    # an endpoint's instances' lines (shop's instances print as they start and serve)
    endpoint_group = "/aws/sagemaker/Endpoints/shop"
    before = poll_until(lambda: stream_events(logs, endpoint_group), bool)
    page = tab.open("/console/endpoints/shop")
    shown = shown_lines(page)
    after = set(stream_events(logs, endpoint_group))
    assert shown and set(shown) <= after  # each line as GetLogEvents answers it
    assert shown[-1][0] >= max(t for t, *_ in before)  # up to the newest line there was before the page loaded
    assert {stream.split("/")[0] for _, stream, _ in shown} <= {"A", "B"}  # streams VARIANT/INSTANCE


WRITER = "import os, sys; open(os.path.join(os.environ['SERVEKIT_OUTPUT_OUT'], 'words.txt'), 'w').write(sys.argv[1])"


def test_pipelines_page_shows_executions_and_an_executions_steps(tab: Page, up: UpProcess, tmp_path: Path) -> None:
    sm = up.sm()
    role = "arn:aws:iam::000000000000:role/pipelines"
    words = {
        "Name": "words",
        "Parameters": [{"Name": "Text", "Type": "String", "DefaultValue": "a b c"}],
        "Steps": [
            {
                "Name": "write",
                "Type": "Processing",
                "Command": [sys.executable, "-c", WRITER, {"Get": "Parameters.Text"}],
                "Outputs": ["out"],
                "CacheConfig": {"Enabled": True},
            },
        ],
    }
    broken = {
        "Name": "broken",
        "Steps": [{"Name": "explode", "Type": "Processing", "Command": [sys.executable, "-c", "raise SystemExit(3)"]}],
    }
    for doc in (words, broken):
        sm.create_pipeline(
            PipelineName=doc["Name"],
            PipelineDefinition=json.dumps(doc),
            RoleArn=role,
            ClientRequestToken=f"create-{doc['Name']}".ljust(32, "0"),
        )

    def run(name: str, token: str) -> dict[str, Any]:
        arn = sm.start_pipeline_execution(PipelineName=name, ClientRequestToken=token.ljust(32, "0"))[
            "PipelineExecutionArn"
        ]
        return dict(
            poll_until(
                lambda: sm.describe_pipeline_execution(PipelineExecutionArn=arn),
                lambda d: d["PipelineExecutionStatus"] not in ("Executing",),
            )
        )

    first, failed = run("words", "words-1"), run("broken", "broken-1")
    second = run("words", "words-2")  # the same inputs: its write step is a cache hit of the first
    assert (first["PipelineExecutionStatus"], second["PipelineExecutionStatus"]) == ("Succeeded", "Succeeded")
    assert failed["PipelineExecutionStatus"] == "Failed"

    page = tab.open("/console/")
    page.get_by_role("link", name="Pipelines").click()
    page.wait_for_url("**/console/pipelines")
    tab.polled()
    listed = page.locator("table", has_text="Executions of words").locator("tbody tr").all_inner_texts()
    assert len(listed) == 2 and all("Succeeded" in row for row in listed)
    broken_rows = page.locator("table", has_text="Executions of broken").locator("tbody tr")
    assert "Failed" in broken_rows.inner_text()
    tab.shot("pipelines")

    steps = sm.list_pipeline_execution_steps(PipelineExecutionArn=second["PipelineExecutionArn"])
    write = steps["PipelineExecutionSteps"][0]
    assert write["CacheHitResult"]["SourcePipelineExecutionArn"] == first["PipelineExecutionArn"]
    page.get_by_role("link", name=second["PipelineExecutionDisplayName"]).click()
    page.wait_for_url("**/console/pipelines/execution?arn=*")
    tab.polled()
    row = page.locator("table", has_text="Steps").locator("tr", has_text="write").inner_text()
    assert write["StepStatus"] in row and f"hit, from {first['PipelineExecutionArn'].rsplit('/', 1)[-1]}" in row
    tab.shot("pipeline-execution")

    tab.open("/console/pipelines/execution?arn=" + failed["PipelineExecutionArn"])
    tab.polled()
    explode = sm.list_pipeline_execution_steps(PipelineExecutionArn=failed["PipelineExecutionArn"])
    reason = explode["PipelineExecutionSteps"][0]["FailureReason"]
    assert reason and reason in page.locator("table", has_text="Steps").inner_text()
    gone = failed["PipelineExecutionArn"].rsplit("/", 1)[0] + "/nosuchexecution"
    missing = tab.context.request.get("/console/pipelines/execution?arn=" + gone)
    assert missing.status == 404 and "does not exist" in missing.text()
    malformed = tab.context.request.get("/console/pipelines/execution?arn=not-an-arn")
    assert malformed.status == 400 and "ValidationException" in malformed.text()


SCORER = (
    "import json\n\n"
    "def model_fn(model_dir):\n    return 1.0\n\n"
    "def transform_fn(model, data, content_type, accept):\n"
    "    rows = json.loads(data)\n"
    "    return json.dumps({'score': [sum(r) for r in rows]}), 'application/json'\n"
)


def test_monitoring_page_shows_drift_per_feature_violations_and_guarded_reports(
    tab: Page, up: UpProcess, tmp_path: Path
) -> None:
    """A data-quality schedule (hours compressed to 3 s) on a capturing endpoint sees drifted traffic: the heatmap's
    cells say what each execution's metrics.json says, the latest violations are listed, and the HTML report opens
    only when signed in and only from inside the execution's output folder."""
    import numpy as np

    sm, rt = up.sm(), up.rt()
    rng = np.random.default_rng(7)
    train = tmp_path / "train.csv"
    train.write_text("x,y\n" + "\n".join(f"{a:.5f},{b:.5f}" for a, b in rng.normal(0, 1, (1000, 2))) + "\n")
    baseline = tmp_path / "baseline"
    cli = [sys.executable, "-m", "servekit.cli.main", "monitor", "baseline", "--data", str(train), "--out"]
    made = subprocess.run([*cli, str(baseline)], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stdout + made.stderr
    code = tmp_path / "scorer" / "1" / "code"
    code.mkdir(parents=True)
    (code / "inference.py").write_text(SCORER)
    capture, reports = tmp_path / "capture", tmp_path / "reports"
    sm.create_model(ModelName="scorer", PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(code.parent.parent)})
    sm.create_endpoint_config(
        EndpointConfigName="churn-cfg",
        ProductionVariants=[variant("A", "scorer", 1.0)],
        DataCaptureConfig={
            "EnableCapture": True,
            "InitialSamplingPercentage": 100,
            "DestinationS3Uri": f"file://{capture}",
            "CaptureOptions": [{"CaptureMode": "Input"}],
        },
    )
    sm.create_endpoint(EndpointName="churn", EndpointConfigName="churn-cfg")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="churn", WaiterConfig=FAST)
    sm.create_data_quality_job_definition(
        JobDefinitionName="churn-dq",
        DataQualityBaselineConfig={"ConstraintsResource": {"S3Uri": f"file://{baseline}"}},
        DataQualityAppSpecification={"ImageUri": "servekit"},
        DataQualityJobInput={"EndpointInput": {"EndpointName": "churn", "LocalPath": "/opt/ml/processing/input"}},
        DataQualityJobOutputConfig={
            "MonitoringOutputs": [{"S3Output": {"S3Uri": f"file://{reports}", "LocalPath": "/opt/ml/processing/out"}}]
        },
        JobResources={"ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.m5.large", "VolumeSizeInGB": 1}},
        RoleArn="arn:aws:iam::000000000000:role/monitor",
    )
    sm.create_monitoring_schedule(
        MonitoringScheduleName="churn-drift",
        MonitoringScheduleConfig={
            "ScheduleConfig": {
                "ScheduleExpression": "cron(0 * ? * * *)",
                "DataAnalysisStartTime": "-PT24H",
                "DataAnalysisEndTime": "-PT0H",
            },
            "MonitoringJobDefinitionName": "churn-dq",
            "MonitoringType": "DataQuality",
        },
        Tags=[{"Key": "servekit:hour-seconds", "Value": "3"}],
    )
    live = rng.normal(0, 1, (300, 2))
    live[:, 0] += 3.0  # x drifts by three standard deviations, y does not
    body = json.dumps([[round(a, 5), round(b, 5)] for a, b in live])
    rt.invoke_endpoint(EndpointName="churn", Body=body, ContentType="application/json")

    def drifted() -> list[dict[str, Any]]:
        listed = sm.list_monitoring_executions(MonitoringScheduleName="churn-drift", MaxResults=50)
        return [
            e
            for e in listed["MonitoringExecutionSummaries"]
            if e["MonitoringExecutionStatus"] == "CompletedWithViolations"
        ]

    execution = poll_until(drifted, bool, 180)[0]
    job = execution["ProcessingJobArn"].rsplit("/", 1)[1]
    described = sm.describe_processing_job(ProcessingJobName=job)
    folder = Path(described["ProcessingOutputConfig"]["Outputs"][0]["S3Output"]["S3Uri"].removeprefix("file://"))
    window = [w for w in json.loads((folder / "metrics.json").read_text())["windows"] if w["status"] == "ok"][-1]
    assert window["features"]["x"]["drifted"] and not window["features"]["y"]["drifted"]

    page = tab.open("/console/monitoring")
    heatmap = page.locator("table.heatmap", has_text="churn")
    column = execution["ScheduledTime"].strftime("%H:%M:%S")
    headers = heatmap.locator("thead th").all_inner_texts()
    assert column in headers
    at = headers.index(column)
    for feature, verdict in (("x", "drifted"), ("y", "ok")):
        cells = heatmap.locator("tr", has=page.get_by_role("rowheader", name=feature, exact=True)).locator("td")
        cell = cells.nth(at - 1)
        assert cell.inner_text().endswith(verdict)  # a word, not colour alone
        assert f"{feature} {verdict} in the window ending {window['end']}" in (cell.get_attribute("title") or "")
    violations = page.locator("table", has_text="Latest violations").inner_text()
    assert "baseline_drift_check" in violations and "x" in violations
    tab.shot("monitoring")

    report = "/console/monitoring/report?job=" + job + "&file=report.html"
    assert tab.context.request.get(report).status == 401  # signed out: no report
    sign_in(tab, up, "/console/monitoring")
    outside = tab.context.request.get(f"/console/monitoring/report?job={job}&file=../../../credentials.json")
    assert outside.status == 403 and "outside the execution" in outside.text()
    assert tab.context.request.get(f"/console/monitoring/report?job={job}&file=/etc/passwd").status == 403
    assert tab.context.request.get(f"/console/monitoring/report?job={job}&file=nope.html").status == 404
    links = page.get_by_role("link", name="HTML report")
    assert links.count() >= 1
    opened = tab.context.request.get(report)
    assert opened.status == 200 and "sandbox" in opened.headers["content-security-policy"]
    assert opened.text() == (folder / "report.html").read_text()
    sm.stop_monitoring_schedule(MonitoringScheduleName="churn-drift")  # no more executions for the other tests


def test_monitoring_page_charts_model_quality_per_execution_as_its_metrics_files_say(
    tab: Page, up: UpProcess, tmp_path: Path
) -> None:
    """A model-quality schedule (hours compressed to 5 s) on a capturing iris endpoint: labels for half the requests
    (all right), then for the rest (a third wrong), so later executions judge a worse accuracy. The chart's points
    are exactly each execution's quality_metrics.json (accuracy and f1_macro of its judged window, at its
    ScheduledTime)."""
    from servekit.tools.demo.build import iris_onnx

    sm, rt = up.sm(), up.rt()
    iris_onnx(tmp_path / "iris" / "1")
    capture, reports, store = tmp_path / "capture", tmp_path / "mq", tmp_path / "store"
    sm.create_model(ModelName="iris-m", PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(tmp_path / "iris")})
    sm.create_endpoint_config(
        EndpointConfigName="iris-cfg",
        ProductionVariants=[variant("A", "iris-m", 1.0)],
        DataCaptureConfig={
            "EnableCapture": True,
            "InitialSamplingPercentage": 100,
            "DestinationS3Uri": f"file://{capture}",
            "CaptureOptions": [{"CaptureMode": "Input"}, {"CaptureMode": "Output"}],
        },
    )
    sm.create_endpoint(EndpointName="iris", EndpointConfigName="iris-cfg")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="iris", WaiterConfig=FAST)
    rows = [[5.1, 3.5, 1.4, 0.2], [6.0, 2.9, 4.5, 1.5], [6.9, 3.1, 5.4, 2.1]]
    predicted: dict[str, int] = {}
    for n in range(30):
        out = rt.invoke_endpoint(
            EndpointName="iris", Body=json.dumps([rows[n % 3]]), ContentType="application/json", InferenceId=f"r-{n}"
        )
        predicted[f"r-{n}"] = int(json.loads(out["Body"].read())["predictions"][0]["label"])

    def ingest(part: str, labels: dict[str, int]) -> None:
        path = tmp_path / f"labels-{part}.csv"
        path.write_text("inference_id,label\n" + "".join(f"{k},{v}\n" for k, v in labels.items()))
        cli = [sys.executable, "-m", "servekit.cli.main", "monitor", "labels", "--data", str(path)]
        done = subprocess.run(
            [*cli, "--id-column", "inference_id", "--store", str(store)], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr

    ids = list(predicted)
    ingest("first", {k: predicted[k] for k in ids[:15]})  # the model is right on all of these
    wait_for(lambda: sum(len(f.read_bytes().splitlines()) for f in capture.rglob("*.jsonl")) == 30, 60)
    constraints = tmp_path / "constraints.json"
    constraints.write_text(json.dumps({"multiclass_classification_constraints": {"accuracy": {"threshold": 0.9}}}))
    sm.create_model_quality_job_definition(
        JobDefinitionName="iris-mq",
        ModelQualityBaselineConfig={"ConstraintsResource": {"S3Uri": f"file://{constraints}"}},
        ModelQualityAppSpecification={
            "ImageUri": "servekit",
            "ProblemType": "MulticlassClassification",
            "ContainerArguments": ["--min-window-rows", "10", "--no-report"],
        },
        ModelQualityJobInput={
            "EndpointInput": {"EndpointName": "iris", "LocalPath": "/opt/ml/processing/input"},
            "GroundTruthS3Input": {"S3Uri": f"file://{store}"},
        },
        ModelQualityJobOutputConfig={
            "MonitoringOutputs": [{"S3Output": {"S3Uri": f"file://{reports}", "LocalPath": "/opt/ml/processing/o"}}]
        },
        JobResources={"ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.m5.large", "VolumeSizeInGB": 1}},
        RoleArn="arn:aws:iam::000000000000:role/monitor",
    )
    sm.create_monitoring_schedule(
        MonitoringScheduleName="iris-quality",
        MonitoringScheduleConfig={
            "ScheduleConfig": {
                "ScheduleExpression": "cron(0 * ? * * *)",
                "DataAnalysisStartTime": "-PT24H",
                "DataAnalysisEndTime": "-PT0H",
            },
            "MonitoringJobDefinitionName": "iris-mq",
            "MonitoringType": "ModelQuality",
        },
        Tags=[{"Key": "servekit:hour-seconds", "Value": "5"}],
    )

    def listed() -> list[dict[str, Any]]:
        found = sm.list_monitoring_executions(MonitoringScheduleName="iris-quality", MaxResults=50)
        return list(found["MonitoringExecutionSummaries"])

    def window_of(execution: dict[str, Any]) -> dict[str, Any]:
        job = sm.describe_processing_job(ProcessingJobName=execution["ProcessingJobArn"].rsplit("/", 1)[1])
        folder = Path(job["ProcessingOutputConfig"]["Outputs"][0]["S3Output"]["S3Uri"].removeprefix("file://"))
        metrics = json.loads((folder / "quality_metrics.json").read_text())
        return [w for w in metrics["windows"] if w["status"] == "ok"][-1]

    def judged(labelled: int) -> bool:
        runs = [e for e in listed() if e["MonitoringExecutionStatus"] in ("Completed", "CompletedWithViolations")]
        return any(window_of(e)["labelled"] == labelled for e in runs)

    wait_for(lambda: judged(15), 120)
    ingest("rest", {k: predicted[k] if n % 3 else (predicted[k] + 1) % 3 for n, k in enumerate(ids[15:])})
    wait_for(lambda: judged(30), 120)
    sm.stop_monitoring_schedule(MonitoringScheduleName="iris-quality")
    wait_for(lambda: all(e["MonitoringExecutionStatus"] not in ("Pending", "InProgress") for e in listed()), 60)
    runs = [e for e in listed() if e["MonitoringExecutionStatus"] in ("Completed", "CompletedWithViolations")]
    runs = sorted(runs, key=lambda e: e["ScheduledTime"])[-12:]  # the newest 12, as the page charts them
    windows = [window_of(e) for e in runs]

    page = tab.open("/console/monitoring")
    page.wait_for_function("() => !!window.servekitConsole.charts['quality-iris']")
    chart = page.evaluate("() => window.servekitConsole.charts['quality-iris'].data")
    assert chart[0] == pytest.approx([e["ScheduledTime"].timestamp() for e in runs], abs=1e-3)  # boto3's datetimes
    assert chart[1] == [w["metrics"]["accuracy"] for w in windows]
    assert chart[2] == [w["metrics"]["f1_macro"] for w in windows]
    assert 1.0 in chart[1] and pytest.approx(25 / 30) in chart[1]  # the labels that came later lowered it
    figure = page.locator("#chart-quality-iris")
    assert "accuracy" in (figure.get_attribute("aria-label") or "")
    table = page.locator("table", has_text="Model quality per execution")
    assert "LessThanThreshold" in table.inner_text()  # the execution with a third wrong broke the constraint
    tab.shot("monitoring-quality")


def test_keyboard_reaches_the_content_first(tab: Page) -> None:
    page = tab.open("/console/")
    page.keyboard.press("Tab")
    focused = page.evaluate("document.activeElement.textContent")
    assert focused == "Skip to content"


def test_instance_chart_shows_desired_and_current_over_time_with_the_scaling_activity(tab: Page, up: UpProcess) -> None:
    """Raising B's minimum to 2 makes the autoscaler scale it out (an activity); the chart's series are the
    metrics API's counts and the activity is marked at its start. Last in the file: it leaves B with 2 instances."""
    aas, sm = up.client("application-autoscaling"), up.sm()
    aas.register_scalable_target(
        ServiceNamespace="sagemaker",
        ResourceId="endpoint/shop/variant/B",
        ScalableDimension="sagemaker:variant:DesiredInstanceCount",
        MinCapacity=2,
        MaxCapacity=2,
    )

    def b() -> dict[str, Any]:
        return {v["VariantName"]: v for v in sm.describe_endpoint(EndpointName="shop")["ProductionVariants"]}["B"]

    poll_until(b, lambda v: v["CurrentInstanceCount"] == 2 and v.get("DesiredInstanceCount") == 2, 120)
    activities = aas.describe_scaling_activities(ServiceNamespace="sagemaker", ResourceId="endpoint/shop/variant/B")
    started = [a["StartTime"].timestamp() for a in activities["ScalingActivities"]]
    assert started
    page = tab.open("/console/endpoints/shop?range=300")
    # wait until the chart holds a settled period with the new count (the plane samples once a period)
    page.wait_for_function(
        "() => { const c = window.servekitConsole.charts['instances-B']; return c && c.data[2].includes(2); }"
    )
    payload = page.evaluate("window.servekitConsole.last")
    chart = {c["key"]: c for c in payload["scaling_charts"]}["instances-B"]
    assert chart["labels"] == ["desired", "current"]
    xs, desired, current = chart["data"]
    assert 1 in desired and 2 in desired and 1 in current and 2 in current  # before and after the scale-out
    first_two = next(x for x, d in zip(xs, desired, strict=True) if d == 2)
    assert first_two < max(x for x, c in zip(xs, current, strict=True) if c == 1) + 60  # desired leads current
    # every value is the metrics API's Maximum for its period
    answer = up.client("cloudwatch").get_metric_data(
        MetricDataQueries=[
            {
                "Id": "d",
                "MetricStat": {
                    "Metric": {
                        "Namespace": "servekit/Endpoints",
                        "MetricName": "DesiredInstanceCount",
                        "Dimensions": [
                            {"Name": "EndpointName", "Value": "shop"},
                            {"Name": "VariantName", "Value": "B"},
                        ],
                    },
                    "Period": payload["period"],
                    "Stat": "Maximum",
                },
            }
        ],
        StartTime=xs[0],
        EndTime=xs[-1] + payload["period"],
        ScanBy="TimestampAscending",
    )["MetricDataResults"][0]
    api = {int(t.timestamp()): v for t, v in zip(answer["Timestamps"], answer["Values"], strict=True)}
    settled = [i for i, x in enumerate(xs) if x <= payload["now"] - 3]
    assert [desired[i] for i in settled] == [api.get(int(xs[i])) for i in settled]
    marks = chart["marks"]
    assert [m["t"] for m in marks] == sorted(t for t in started if xs[0] <= t)
    assert any("desired instance count to 2" in m["label"] for m in marks)
    figure = page.locator("#chart-instances-B")
    assert "scaling activities marked" in (figure.get_attribute("aria-label") or "")
    assert "desired instance count to 2" in page.locator('[data-live="autoscaling"]').inner_text()
    tab.shot("endpoint-shop-autoscaling")


def test_stop_rollout_sets_its_alarm_to_alarm_and_the_deployment_rolls_back(tab: Page, up: UpProcess) -> None:
    """SageMaker has no StopDeployment: the console's stop is SetAlarmState(ALARM) on the rollout's alarm, which the
    deployment watches. Refused without a session or its CSRF token. Last: it ends fraud's rollout."""
    page = tab.open("/console/endpoints/fraud")
    assert "Sign in to stop this rollout" in page.locator('[data-live="rollout"]').inner_text()
    refused = tab.context.request.post(
        "/console/endpoints/fraud/rollback", form={"alarm": "fraud-5xx"}, max_redirects=0
    )
    assert refused.status == 401
    sign_in(tab, up, "/console/endpoints/fraud")
    no_token = tab.context.request.post(
        "/console/endpoints/fraud/rollback", form={"alarm": "fraud-5xx"}, max_redirects=0
    )
    assert no_token.status == 403
    sm, cw = up.sm(), up.client("cloudwatch")
    assert sm.describe_endpoint(EndpointName="fraud")["EndpointStatus"] == "Updating"  # neither call changed it
    tab.shot("endpoint-fraud-stop-rollout")
    page.get_by_role("button", name="Roll back: set fraud-5xx to ALARM").click()
    page.wait_for_url("**flash=*")
    assert "fraud-5xx set to ALARM" in page.get_by_role("status").inner_text()
    described = poll_until(
        lambda: sm.describe_endpoint(EndpointName="fraud"),
        lambda d: d["EndpointStatus"] == "InService" and "PendingDeploymentSummary" not in d,
    )
    assert described["EndpointConfigName"] == "fraud-v1"  # rolled back to the old config
    assert "fraud-5xx" in described.get("FailureReason", "")
    history = cw.describe_alarm_history(AlarmName="fraud-5xx", HistoryItemType="StateUpdate")["AlarmHistoryItems"]
    admin = Credentials.load(up.home).admin
    assert any(admin.access_key_id in h["HistoryData"] or "servekit console" in h["HistorySummary"] for h in history)
    page.reload()
    assert "No deployment in progress" in page.locator('[data-live="rollout"]').inner_text()
    assert page.get_by_role("button", name="Roll back: set fraud-5xx to ALARM").count() == 0
