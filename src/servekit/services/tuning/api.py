"""SageMaker's hyperparameter tuning jobs on ``servekit up``: CreateHyperParameterTuningJob runs a search (a task of
the plane) that launches training jobs through the training service, at most ``MaxParallelTrainingJobs`` at once and
``MaxNumberOfTrainingJobs`` in all, reads each one's objective from its ``FinalMetricDataList`` and keeps the best;
DescribeHyperParameterTuningJob, ListHyperParameterTuningJobs, ListTrainingJobsForHyperParameterTuningJob and
StopHyperParameterTuningJob answer in botocore's shapes.

With the Hyperband strategy or ``TrainingJobEarlyStoppingType: Auto`` the search also follows each running job's
log (every ``poll_s``), reads the objective it prints per epoch and stops the job its stopper
(:mod:`servekit.services.tuning.stopping`) gives up on; a stopped job ends ``Stopped`` with its last values as its
``FinalMetricDataList``. A warm start (:mod:`servekit.services.tuning.warmstart`) seeds the strategy with its parents'
completed jobs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from servekit.aws.errors import ApiError, validation_exception
from servekit.aws.front import Handler
from servekit.aws.names import Account
from servekit.services.training.api import TrainingJobsApi
from servekit.services.training.images import algorithm_metrics
from servekit.services.training.jobs import RESTARTED, JobTasks, fail_unfinished, list_page, when
from servekit.services.training.metrics import LogLines, evaluation_regex, metric_values
from servekit.services.training.runner import KIND as TRAINING
from servekit.services.training.store import JobExists, SageMakerJobRow, SageMakerJobs
from servekit.services.tuning import warmstart
from servekit.services.tuning.space import (
    HyperbandSearch,
    SpaceError,
    Strategy,
    auto,
    hyperband_resources,
    parse,
    strategy,
)
from servekit.services.tuning.stopping import MedianStopping, Stopper
from servekit.services.tuning.warmstart import OBJECTIVE_HP, Parent, WarmStartError

log = logging.getLogger(__name__)

KIND = "tuning"
_ENDED = ("Completed", "Failed", "Stopped")


def objective_of(row: SageMakerJobRow, metric: str) -> float | None:
    for m in row.details.get("FinalMetricDataList") or []:
        if m.get("MetricName") == metric:
            return float(m["Value"])
    return None


class LogCurve:
    """One training job's objective values, read from its log as the log grows (complete lines only, until the job
    has ended)."""

    def __init__(self, path: Path, regex: str) -> None:
        self.regex = regex
        self.values: list[float] = []
        self._lines = LogLines(path)

    def read(self, final: bool = False) -> bool:
        """Read what the log gained; whether new values came with it."""
        new = metric_values(self.regex, self._lines.read(final))
        self.values += new
        return bool(new)


class TuningJobsApi:
    def __init__(self, jobs: SageMakerJobs, training: TrainingJobsApi, account: Account, poll_s: float = 0.25) -> None:
        self.jobs = jobs
        self.training = training
        self.account = account
        self.poll_s = poll_s  # how often a search with a stopper reads its running jobs' logs
        self._tasks = JobTasks()
        self._stops: dict[str, asyncio.Event] = {}

    def handlers(self) -> dict[str, Handler]:
        return {
            "CreateHyperParameterTuningJob": self.create,
            "DescribeHyperParameterTuningJob": self.describe,
            "ListHyperParameterTuningJobs": self.list,
            "ListTrainingJobsForHyperParameterTuningJob": self.list_training_jobs,
            "StopHyperParameterTuningJob": self.stop,
        }

    def start(self) -> None:
        fail_unfinished(self.jobs, KIND, ("InProgress", "Stopping"))

    async def close(self) -> None:
        await self._tasks.close()

    # ---- operations ------------------------------------------------------------------------------------------
    async def create(self, p: dict[str, Any]) -> dict[str, Any]:
        name = p["HyperParameterTuningJobName"]
        config = p["HyperParameterTuningJobConfig"]
        definition = p.get("TrainingJobDefinition")
        if definition is None:
            raise validation_exception(
                "TrainingJobDefinition is required here (TrainingJobDefinitions is not supported)"
            )
        objective = config.get("HyperParameterTuningJobObjective")
        if not objective:
            raise validation_exception("HyperParameterTuningJobObjective is required (the metric to optimize)")
        spec = definition.get("AlgorithmSpecification") or {}
        metrics = {m["Name"] for m in spec.get("MetricDefinitions") or []}
        metrics |= algorithm_metrics(str(spec.get("TrainingImage") or ""))  # a built-in algorithm's own
        if objective["MetricName"] not in metrics:
            raise validation_exception(
                f"The objective metric {objective['MetricName']} is not among the training job definition's "
                f"MetricDefinitions or its built-in algorithm's metrics ({', '.join(sorted(metrics)) or 'none'})"
            )
        name_of_strategy = config.get("Strategy", "Bayesian")
        if (config.get("StrategyConfig") or {}).get("HyperbandStrategyConfig") and name_of_strategy != "Hyperband":
            raise validation_exception(
                f"StrategyConfig.HyperbandStrategyConfig is for the Hyperband strategy, not {name_of_strategy}"
            )
        if name_of_strategy == "Hyperband" and config.get("TrainingJobEarlyStoppingType", "Off") != "Off":
            raise validation_exception(
                "TrainingJobEarlyStoppingType must be Off with the Hyperband strategy: Hyperband stops training "
                "jobs early itself"
            )
        try:
            self._strategy(name, p, 0)
        except SpaceError as exc:
            raise validation_exception(str(exc)) from None
        if p.get("WarmStartConfig"):
            try:
                warmstart.check(p, self._parents(p))
            except WarmStartError as exc:
                raise validation_exception(str(exc)) from None
        arn = self.account.arn_of("hyper-parameter-tuning-job", name)
        # SageMaker adds the objective to the static hyperparameters (DescribeHyperParameterTuningJob says it, each
        # training job gets it; the SDK's tuner deletes it when it rebuilds an estimator from the description)
        statics = {**(definition.get("StaticHyperParameters") or {}), OBJECTIVE_HP: objective["MetricName"]}
        p = {**p, "TrainingJobDefinition": {**definition, "StaticHyperParameters": statics}}
        try:
            self.jobs.create(KIND, name, arn, p, "InProgress", "")
        except JobExists:
            raise ApiError("ResourceInUse", f"Hyperparameter tuning job {name} already exists", 400) from None
        self._stops[name] = asyncio.Event()
        self._tasks.start(name, self._run(name))
        return {"HyperParameterTuningJobArn": arn}

    @staticmethod
    def _strategy(name: str, p: Mapping[str, Any], seed: int) -> Strategy:
        config, definition = p["HyperParameterTuningJobConfig"], p["TrainingJobDefinition"]
        chosen = config.get("Strategy", "Bayesian")
        resources = None
        if chosen == "Hyperband":
            resources = hyperband_resources(
                (config.get("StrategyConfig") or {}).get("HyperbandStrategyConfig") or {},
                definition.get("StaticHyperParameters") or {},
            )
        maximize = config["HyperParameterTuningJobObjective"]["Type"] == "Maximize"
        return strategy(chosen, parse(config.get("ParameterRanges") or {}), seed, maximize, resources)

    def _parents(self, p: Mapping[str, Any]) -> dict[str, Parent | None]:
        out: dict[str, Parent | None] = {}
        for ref in (p.get("WarmStartConfig") or {}).get("ParentHyperParameterTuningJobs") or []:
            name = ref["HyperParameterTuningJobName"]
            row = self.jobs.get(KIND, name)
            out[name] = None if row is None else Parent(row.name, row.status, row.request, row.details)
        return out

    async def _run(self, name: str) -> None:
        try:
            await self._search(name)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                self.jobs.update(KIND, name, status="Failed", reason=RESTARTED, final=True)
            raise
        except Exception as exc:
            log.exception("tuning job %s failed in servekit", name)
            self.jobs.update(KIND, name, status="Failed", reason=f"InternalServerError: {exc}", final=True)
        finally:
            self._stops.pop(name, None)

    async def _search(self, name: str) -> None:
        row = self.jobs.get(KIND, name)
        assert row is not None
        p = row.request
        config, definition = p["HyperParameterTuningJobConfig"], p["TrainingJobDefinition"]
        objective = config["HyperParameterTuningJobObjective"]
        maximize = objective["Type"] == "Maximize"
        seed = int(config.get("RandomSeed", zlib.crc32(name.encode())))
        search = self._strategy(name, p, seed)
        parents = [parent for parent in self._parents(p).values() if parent is not None]
        if parents:
            used = search.seed(warmstart.history(parents))
            log.info("tuning job %s: %d result(s) of its parents seed the search", name, used)
        stopper: Stopper | None = None
        if isinstance(search, HyperbandSearch):
            stopper = search
        elif config.get("TrainingJobEarlyStoppingType", "Off") == "Auto":
            stopper = MedianStopping(maximize)
        definitions = (definition.get("AlgorithmSpecification") or {}).get("MetricDefinitions") or []
        regex = next(
            (d["Regex"] for d in definitions if d["Name"] == objective["MetricName"]),
            evaluation_regex(objective["MetricName"]),  # a built-in algorithm's own metric, in its evaluation lines
        )
        limits = config.get("ResourceLimits") or {}
        max_jobs = int(limits.get("MaxNumberOfTrainingJobs", 1))
        parallel = max(1, int(limits.get("MaxParallelTrainingJobs", 1)))
        stop = self._stops[name]
        running: dict[str, asyncio.Task[SageMakerJobRow]] = {}
        curves: dict[str, LogCurve] = {}
        stopping: set[str] = set()
        launched = 0
        trials: list[dict[str, Any]] = []
        while not stop.is_set():
            while len(running) < parallel and launched < max_jobs and not stop.is_set():
                job = f"{name[:22]}-{launched + 1:03d}-{zlib.crc32(f'{name}{launched + 1}'.encode()):08x}"
                tuned = search.suggest(job)
                if tuned is None:  # a grid ran out
                    max_jobs = launched
                    break
                launched += 1
                request = {
                    k: v
                    for k, v in definition.items()
                    if k
                    not in (
                        "StaticHyperParameters",
                        "DefinitionName",
                        "TuningObjective",
                        "HyperParameterRanges",
                        "HyperParameterTuningResourceConfig",
                    )
                }
                request["ResourceConfig"] = resource_config(definition)
                request.update(
                    TrainingJobName=job,
                    HyperParameters={
                        **(definition.get("StaticHyperParameters") or {}),
                        **auto(config.get("ParameterRanges") or {}),
                        **tuned,
                    },
                )
                try:
                    self.training.launch(request, tuning_arn=row.arn)
                except ApiError as exc:
                    self.jobs.update(
                        KIND, name, status="Failed", reason=f"Training job {job}: {exc.message}", final=True
                    )
                    return
                running[job] = asyncio.create_task(self.training.wait(job))
                if stopper is not None:
                    stopper.launched(job)
                    curves[job] = LogCurve(self.log_of(job), regex)
                trials.append({"TrainingJobName": job, "TunedHyperParameters": tuned})
                self._record(name, trials, parents)
            if not running:
                break
            stopper_task = asyncio.create_task(stop.wait())
            done, _ = await asyncio.wait(
                {*running.values(), stopper_task},
                timeout=self.poll_s if stopper is not None else None,
                return_when=asyncio.FIRST_COMPLETED,
            )
            stopper_task.cancel()
            changed = bool(done)
            if stopper is not None:
                for job, task in running.items():
                    if task in done or job in stopping or not curves[job].read():
                        continue
                    reason = stopper.progress(job, curves[job].values)
                    if reason is not None:
                        log.info("tuning job %s stops training job %s: %s", name, job, reason)
                        stopping.add(job)
                        self._stop_training(job, reason)
                        changed = True
            for job, task in list(running.items()):
                if task not in done:
                    continue
                del running[job]
                ended = task.result()
                if stopper is not None:
                    curves[job].read(final=True)
                    stopper.ended(job, curves.pop(job).values)
                value = (
                    objective_of(ended, objective["MetricName"]) if ended.status in ("Completed", "Stopped") else None
                )
                search.observe(job, value)
            if changed:
                self._record(name, trials, parents)
        if stop.is_set():
            for job in running:
                self._stop_training(job, "Stopped by the tuning job")
            for task in running.values():
                with contextlib.suppress(Exception):
                    await task
            self._record(name, trials, parents)
            self.jobs.update(KIND, name, status="Stopped", final=True)
            return
        best = self._record(name, trials, parents)
        if best is None:
            self.jobs.update(
                KIND, name, status="Failed", reason="No training job completed with the objective metric", final=True
            )
        else:
            self.jobs.update(KIND, name, status="Completed", final=True)

    def log_of(self, job: str) -> Path:
        return self.training.runner.log_path(job)

    def _stop_training(self, job: str, reason: str) -> None:
        if self.training.runner.stop(job, reason):
            self.jobs.update(TRAINING, job, status="Stopping", secondary="Stopping")

    def _record(self, name: str, trials: list[dict[str, Any]], parents: list[Parent]) -> dict[str, Any] | None:
        """Counters, every training job's summary and the best so far, into the tuning job's row."""
        tuning = self.jobs.get(KIND, name)
        assert tuning is not None
        config = tuning.request["HyperParameterTuningJobConfig"]
        objective = config["HyperParameterTuningJobObjective"]
        counters = {"Completed": 0, "InProgress": 0, "RetryableError": 0, "NonRetryableError": 0, "Stopped": 0}
        objectives = {"Succeeded": 0, "Pending": 0, "Failed": 0}
        summaries: list[dict[str, Any]] = []
        best: dict[str, Any] | None = None
        maximize = objective["Type"] == "Maximize"
        for t in trials:
            row = self.jobs.get(TRAINING, t["TrainingJobName"])
            if row is None:
                continue
            status = row.status if row.status in _ENDED else "InProgress"
            counters[{"Failed": "NonRetryableError"}.get(status, status)] += 1
            value = objective_of(row, objective["MetricName"]) if status in ("Completed", "Stopped") else None
            objective_status = "Pending" if status == "InProgress" else ("Succeeded" if value is not None else "Failed")
            objectives[objective_status] += 1
            summary: dict[str, Any] = {
                "TrainingJobName": row.name,
                "TrainingJobArn": row.arn,
                "TuningJobName": name,
                "CreationTime": row.created,
                "TrainingJobStatus": row.status,
                "TunedHyperParameters": t["TunedHyperParameters"],
                "ObjectiveStatus": objective_status,
            }
            if row.details.get("TrainingStartTime") is not None:
                summary["TrainingStartTime"] = row.details["TrainingStartTime"]
            if row.ended is not None:
                summary["TrainingEndTime"] = row.ended
            if row.failure_reason:
                summary["FailureReason"] = row.failure_reason
            if value is not None:
                summary["FinalHyperParameterTuningJobObjectiveMetric"] = {
                    "Type": objective["Type"],
                    "MetricName": objective["MetricName"],
                    "Value": value,
                }
                current = best["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] if best else None
                if current is None or (value > current if maximize else value < current):
                    best = summary
            summaries.append(summary)
        details: dict[str, Any] = {"Counters": counters, "Objectives": objectives, "TrainingJobs": summaries}
        if best is not None:
            details["BestTrainingJob"] = best
        warm = tuning.request.get("WarmStartConfig") or {}
        if warm.get("WarmStartType") == "IdenticalDataAndAlgorithm":
            overall = warmstart.overall_best(best, parents, maximize)
            if overall is not None:
                details["OverallBestTrainingJob"] = overall
        self.jobs.update(KIND, name, details=details)
        return best

    def _row(self, name: str) -> SageMakerJobRow:
        row = self.jobs.get(KIND, name)
        if row is None:
            raise ApiError("ResourceNotFound", f"Amazon SageMaker can't find a tuning job named {name}", 400)
        return row

    @staticmethod
    def _summary_out(s: Mapping[str, Any]) -> dict[str, Any]:
        return {k: (when(v) if k.endswith("Time") else v) for k, v in s.items()}

    async def describe(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._row(p["HyperParameterTuningJobName"])
        d = row.details
        out: dict[str, Any] = {
            "HyperParameterTuningJobName": row.name,
            "HyperParameterTuningJobArn": row.arn,
            "HyperParameterTuningJobConfig": {
                "TrainingJobEarlyStoppingType": "Off",
                **row.request["HyperParameterTuningJobConfig"],
            },
            "TrainingJobDefinition": described_definition(row.request["TrainingJobDefinition"]),
            "HyperParameterTuningJobStatus": row.status,
            "CreationTime": when(row.created),
            "LastModifiedTime": when(row.modified),
            "TrainingJobStatusCounters": d.get("Counters")
            or {"Completed": 0, "InProgress": 0, "RetryableError": 0, "NonRetryableError": 0, "Stopped": 0},
            "ObjectiveStatusCounters": d.get("Objectives") or {"Succeeded": 0, "Pending": 0, "Failed": 0},
            "WarmStartConfig": row.request.get("WarmStartConfig"),
        }
        if row.ended is not None:
            out["HyperParameterTuningEndTime"] = when(row.ended)
        if d.get("BestTrainingJob"):
            out["BestTrainingJob"] = self._summary_out(d["BestTrainingJob"])
        if d.get("OverallBestTrainingJob"):
            out["OverallBestTrainingJob"] = self._summary_out(d["OverallBestTrainingJob"])
        if row.failure_reason:
            out["FailureReason"] = row.failure_reason
        return {k: v for k, v in out.items() if v is not None}

    async def list(self, p: dict[str, Any]) -> dict[str, Any]:
        page = list_page(self.jobs, KIND, p)
        summaries = []
        for r in page.items:
            config = r.request["HyperParameterTuningJobConfig"]
            summaries.append(
                {
                    "HyperParameterTuningJobName": r.name,
                    "HyperParameterTuningJobArn": r.arn,
                    "HyperParameterTuningJobStatus": r.status,
                    "Strategy": config.get("Strategy", "Bayesian"),
                    "CreationTime": when(r.created),
                    "TrainingJobStatusCounters": r.details.get("Counters")
                    or {"Completed": 0, "InProgress": 0, "RetryableError": 0, "NonRetryableError": 0, "Stopped": 0},
                    "ObjectiveStatusCounters": r.details.get("Objectives")
                    or {"Succeeded": 0, "Pending": 0, "Failed": 0},
                }
            )
        out: dict[str, Any] = {"HyperParameterTuningJobSummaries": summaries}
        if page.next_token:
            out["NextToken"] = page.next_token
        return out

    async def list_training_jobs(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._row(p["HyperParameterTuningJobName"])
        jobs = [self._summary_out(s) for s in row.details.get("TrainingJobs") or []]
        if p.get("StatusEquals"):
            jobs = [j for j in jobs if j["TrainingJobStatus"] == p["StatusEquals"]]
        if p.get("SortBy") == "FinalObjectiveMetricValue":
            maximize = row.request["HyperParameterTuningJobConfig"]["HyperParameterTuningJobObjective"]["Type"] == (
                "Maximize"
            )
            scored = [j for j in jobs if "FinalHyperParameterTuningJobObjectiveMetric" in j]
            scored.sort(key=lambda j: j["FinalHyperParameterTuningJobObjectiveMetric"]["Value"], reverse=maximize)
            jobs = scored + [j for j in jobs if "FinalHyperParameterTuningJobObjectiveMetric" not in j]
        elif p.get("SortOrder", "Descending") == "Descending":
            jobs.reverse()
        limit = int(p.get("MaxResults", 10))
        start = int(p["NextToken"]) if str(p.get("NextToken", "")).isdigit() else 0
        out: dict[str, Any] = {"TrainingJobSummaries": jobs[start : start + limit]}
        if start + limit < len(jobs):
            out["NextToken"] = str(start + limit)
        return out

    async def stop(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._row(p["HyperParameterTuningJobName"])
        if row.status != "InProgress":
            raise validation_exception(f"The tuning job {row.name} is {row.status}; only an InProgress job stops")
        self.jobs.update(KIND, row.name, status="Stopping")
        event = self._stops.get(row.name)
        if event is not None:
            event.set()
        return {}


def resource_config(definition: Mapping[str, Any]) -> dict[str, Any]:
    """The ResourceConfig of a definition's training jobs: its own, or the one its
    ``HyperParameterTuningResourceConfig`` names (what the SDK's tuner sends: instance type, count and volume, or
    ``InstanceConfigs``, of which servekit takes the first). DescribeHyperParameterTuningJob answers it too (the
    SDK's ``HyperparameterTuner.attach`` reads the definition's ResourceConfig)."""
    given = definition.get("ResourceConfig")
    if given:
        return dict(given)
    hpo = definition.get("HyperParameterTuningResourceConfig") or {}
    first = (hpo.get("InstanceConfigs") or [{}])[0]
    out = {
        "InstanceType": first.get("InstanceType") or hpo.get("InstanceType") or "ml.m5.large",
        "InstanceCount": int(first.get("InstanceCount") or hpo.get("InstanceCount") or 1),
        "VolumeSizeInGB": int(first.get("VolumeSizeInGB") or hpo.get("VolumeSizeInGB") or 30),
    }
    if hpo.get("VolumeKmsKeyId"):
        out["VolumeKmsKeyId"] = hpo["VolumeKmsKeyId"]
    return out


def described_definition(definition: Mapping[str, Any]) -> dict[str, Any]:
    """The TrainingJobDefinition as DescribeHyperParameterTuningJob answers it: with its ResourceConfig
    (:func:`resource_config`) and its algorithm's MetricDefinitions, which SageMaker fills in for a built-in
    algorithm (each metric it reports, with the regex that finds it in its log) and answers empty for an image
    without any (the SDK's tuner reads them when it rebuilds a tuner from a description)."""
    spec = dict(definition.get("AlgorithmSpecification") or {})
    if not spec.get("MetricDefinitions"):
        builtin = sorted(algorithm_metrics(str(spec.get("TrainingImage") or "")))
        spec["MetricDefinitions"] = [{"Name": m, "Regex": evaluation_regex(m)} for m in builtin]
    return {"ResourceConfig": resource_config(definition), **definition, "AlgorithmSpecification": spec}
