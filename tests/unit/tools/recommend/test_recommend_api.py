"""The Inference Recommender operations over a real state database with an injected runner (no processes): how a
request becomes a recommendation spec, the job's statuses, refusals, listing, and jobs a restart left behind."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from servekit.aws.errors import ApiError
from servekit.services.database import StateDB
from servekit.services.hosting.instance_types import InstanceTypes, load_instance_types
from servekit.services.hosting.store_rows import ContainerSpec
from servekit.tools.recommend.api import RecommendationJobs
from servekit.tools.recommend.spec import BatchingChoice, RecommendSpec


def request(name: str = "job", **changes: Any) -> dict[str, Any]:
    p: dict[str, Any] = {
        "JobName": name,
        "JobType": "Advanced",
        "RoleArn": "arn:aws:iam::123456789012:role/r",
        "InputConfig": {
            "ModelName": "iris",
            "EndpointConfigurations": [
                {
                    "InstanceType": "ml.c5.large",
                    "EnvironmentParameterRanges": {
                        "CategoricalParameterRanges": [{"Name": "SERVEKIT_BATCHING", "Value": ["off", "16:2000"]}]
                    },
                },
                {"InstanceType": "ml.m5.xlarge"},
            ],
            "TrafficPattern": {"Phases": [{"InitialNumberOfUsers": 3, "DurationInSeconds": 2}]},
            "ResourceLimit": {"MaxNumberOfTests": 4},
        },
        "StoppingConditions": {
            "MaxInvocations": 30000,
            "ModelLatencyThresholds": [{"Percentile": "P95", "ValueInMilliseconds": 80}],
        },
        "Tags": [{"Key": "servekit:utilization", "Value": "0.5"}],
    }
    for key, value in changes.items():
        if value is None:
            p["InputConfig"].pop(key, None)
        else:
            p["InputConfig"][key] = value
    return p


class FakeRunner:
    def __init__(self, recommendations: int = 1, fail: str | None = None) -> None:
        self.specs: list[RecommendSpec] = []
        self.recommendations = recommendations
        self.fail = fail

    async def __call__(self, spec: RecommendSpec, table: InstanceTypes, out: Path, job: str) -> dict[str, Any]:
        self.specs.append(spec)
        if self.fail:
            raise RuntimeError(self.fail)
        recs = [{"RecommendationId": f"{job}/1", "EndpointConfiguration": {"InstanceType": "ml.c5.large"}}]
        return {
            "InferenceRecommendations": recs[: self.recommendations],
            "EndpointPerformances": [],
            "types": [{"name": "ml.c5.large", "reason": "p95 99 ms > 80 ms"}],
        }


def service(tmp_path: Path, runner: FakeRunner) -> RecommendationJobs:
    db = StateDB.open(tmp_path / "home")
    if db.hosting.get_model("iris") is None:
        db.hosting.create_model("iris", "arn:model/iris", ContainerSpec(model_data_url=str(tmp_path / "iris")))
    return RecommendationJobs(
        db.recommend_jobs, db.hosting, lambda url: url, load_instance_types(), tmp_path / "recs", runner=runner
    )


async def finish(jobs: RecommendationJobs) -> None:
    await asyncio.gather(*list(jobs._tasks.values()))


def test_a_request_becomes_a_spec_and_the_job_completes(tmp_path: Path) -> None:
    runner = FakeRunner()

    async def go() -> tuple[dict[str, Any], dict[str, Any]]:
        jobs = service(tmp_path, runner)
        arn = (await jobs.create(request()))["JobArn"]
        assert arn.startswith("arn:aws:sagemaker:us-east-1:") and arn.endswith(":inference-recommendations-job/job")
        await finish(jobs)
        return await jobs.describe({"JobName": "job"}), await jobs.list({})

    job, listed = asyncio.run(go())
    (spec,) = runner.specs
    assert spec.instance_types == ("ml.c5.large", "ml.m5.xlarge")
    assert spec.target_qps == 500.0  # 30,000 per minute
    assert (spec.slo_percentile, spec.slo_ms, spec.utilization) == ("p95", 80.0, 0.5)
    assert spec.batching == (BatchingChoice(), BatchingChoice(16, 2000))
    assert (spec.concurrency, spec.phase_s, spec.max_trials) == ((3,), 2.0, 4)
    assert spec.model_dir == str(tmp_path / "iris") and spec.model_name == "iris"
    assert job["Status"] == "COMPLETED" and job["InferenceRecommendations"][0]["RecommendationId"] == "job/1"
    assert "ModelName" not in job and job["InputConfig"]["ModelName"] == "iris"
    assert [(j["JobName"], j["Status"], j["ModelName"]) for j in listed["InferenceRecommendationsJobs"]] == [
        ("job", "COMPLETED", "iris")
    ]


@pytest.mark.parametrize(
    ("runner", "reason"),
    [
        (FakeRunner(fail="instance exited"), "instance exited"),
        (FakeRunner(recommendations=0), "no instance type met the SLO (ml.c5.large: p95 99 ms > 80 ms)"),
    ],
)
def test_a_job_that_cannot_recommend_fails_with_its_reason(tmp_path: Path, runner: FakeRunner, reason: str) -> None:
    async def go() -> dict[str, Any]:
        jobs = service(tmp_path, runner)
        await jobs.create(request())
        await finish(jobs)
        return await jobs.describe({"JobName": "job"})

    job = asyncio.run(go())
    assert job["Status"] == "FAILED" and reason in job["FailureReason"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"EndpointConfigurations": [{"InstanceType": "ml.nope"}]}, "Unknown instance type(s) ml.nope"),
        ({"EndpointConfigurations": None}, "give InputConfig.EndpointConfigurations"),
        ({"ModelName": "ghost"}, 'Could not find model "ghost"'),
        ({"ModelName": None, "ModelPackageVersionArn": "arn:x"}, "model packages are not supported"),
        ({"ContainerConfig": {"PayloadConfig": {"SamplePayloadUrl": "/no/such.jsonl"}}}, "no such file"),
    ],
)
def test_requests_servekit_cannot_measure_are_refused(tmp_path: Path, changes: dict[str, Any], message: str) -> None:
    async def go() -> ApiError:
        jobs = service(tmp_path, FakeRunner())
        with pytest.raises(ApiError) as info:
            await jobs.create(request(**changes))
        return info.value

    err = asyncio.run(go())
    assert err.code == "ValidationException" and message in err.message


def test_a_target_load_is_required_and_names_are_unique(tmp_path: Path) -> None:
    async def go() -> tuple[ApiError, ApiError]:
        jobs = service(tmp_path, FakeRunner())
        p = request()
        p["StoppingConditions"] = {}
        with pytest.raises(ApiError) as missing:
            await jobs.create(p)
        await jobs.create(request())
        with pytest.raises(ApiError) as twice:
            await jobs.create(request())
        await finish(jobs)
        return missing.value, twice.value

    missing, twice = asyncio.run(go())
    assert "MaxInvocations" in missing.message
    assert twice.code == "ResourceInUse"


def test_a_tarball_of_payloads_becomes_one_body_per_line(tmp_path: Path) -> None:
    import io
    import tarfile

    tar_path = tmp_path / "payload.tar.gz"
    with tarfile.open(tar_path, "w:gz") as tar:
        for i, body in enumerate((b'{"instances": [[1, 2]]}\n', b'{"instances":\n [[3, 4]]}')):
            info = tarfile.TarInfo(f"p{i}.json")
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    runner = FakeRunner()

    async def go() -> None:
        jobs = service(tmp_path, runner)
        await jobs.create(request(ContainerConfig={"PayloadConfig": {"SamplePayloadUrl": f"file://{tar_path}"}}))
        await finish(jobs)

    asyncio.run(go())
    payload = runner.specs[0].payload
    assert payload is not None
    assert Path(payload).read_text().splitlines() == ['{"instances": [[1, 2]]}', '{"instances":  [[3, 4]]}']


def test_jobs_left_running_by_a_previous_process_are_marked_failed(tmp_path: Path) -> None:
    db = StateDB.open(tmp_path / "home")
    db.recommend_jobs.create("stale", "arn:x", "iris", {"JobName": "stale"}, "IN_PROGRESS")
    db.recommend_jobs.create("done", "arn:y", "iris", {"JobName": "done"}, "COMPLETED")
    service(tmp_path, FakeRunner())
    stale, done = db.recommend_jobs.get("stale"), db.recommend_jobs.get("done")
    assert stale is not None and done is not None
    assert (stale.status, stale.completed is not None) == ("FAILED", True)
    assert "stopped while the job ran" in stale.failure_reason
    assert done.status == "COMPLETED"


def test_listing_pages_and_filters(tmp_path: Path) -> None:
    clock = iter(range(100, 200))
    db = StateDB.open(tmp_path / "home")
    from servekit.tools.recommend.store import RecommendJobs

    repo = RecommendJobs(db.conn, clock=lambda: float(next(clock)))
    for name in ("a-one", "b-two", "c-one"):
        repo.create(name, f"arn:{name}", "iris", {}, "COMPLETED")
    repo.set_status("b-two", "FAILED", reason="x", final=True)
    first = repo.list(max_results=2)
    assert [r.name for r in first.items] == ["c-one", "b-two"] and first.next_token
    rest = repo.list(max_results=2, next_token=first.next_token)
    assert [r.name for r in rest.items] == ["a-one"] and rest.next_token is None
    assert [r.name for r in repo.list(name_contains="ONE", sort_by="Name", sort_order="Ascending").items] == [
        "a-one",
        "c-one",
    ]
    assert [r.name for r in repo.list(status="FAILED").items] == ["b-two"]
    with pytest.raises(ValueError):
        repo.list(sort_by="Nonsense")
