"""SageMaker's pipeline operations on ``servekit up``, for definitions in either format:

- **SageMaker's own definition JSON** (``"Version": "2020-12-01"``, what the SDK's ``Pipeline`` writes), given as
  ``PipelineDefinition`` or ``PipelineDefinitionS3Location``: checked as SageMaker checks it at CreatePipeline
  (:func:`servekit.services.pipelines.sagemaker.load_definition`) and executed **in the plane** by
  :class:`servekit.services.pipelines.execution.executor.Executor`, each step calling the plane's own Create* operation.
- **servekit's definition format** (the JSON or YAML document ``servekit.services.pipelines`` reads and
  ``Pipeline.to_document`` writes): checked by loading it in a subprocess
  (``python -m servekit.services.pipelines.definition.validate``), kept as ``<home>/pipelines/definitions/<name>.json``,
  and executed by ``servekit pipeline run <that file> --run-id <id>`` as a **subprocess** (its steps run code).

Both write the same state: Describe/List of executions and steps answer from it for either. StopPipelineExecution
asks a run to stop (Stopping, then Stopped). Deleting a pipeline keeps its runs, artifacts and definition file
(lineage and resume still need them).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import yaml

from servekit._utils.files import tail_text
from servekit._utils.processes import owner_alive, pid_alive
from servekit.aws.errors import conflict, resource_not_found, validation_exception
from servekit.aws.front import Handler
from servekit.aws.names import Account
from servekit.aws.offsets import offset_page
from servekit.aws.sessions import SessionKeys
from servekit.aws.timestamps import optional_epoch
from servekit.services.pipelines.definition.nesting import MAX_DEPTH, nesting_depth
from servekit.services.pipelines.execution.executor import DEFAULT_PARALLELISM, Executor
from servekit.services.pipelines.execution.records import SOURCE
from servekit.services.pipelines.execution.selective import SelectionError, select
from servekit.services.pipelines.run_processes import RunProcesses
from servekit.services.pipelines.runs.repo import (
    ApiExecutionRow,
    DefinitionExists,
    DefinitionRow,
    Pipelines,
    RunRow,
    StaleRunStatus,
)
from servekit.services.pipelines.runs.status import RunStatus
from servekit.services.pipelines.sagemaker import (
    DefinitionError,
    ParameterValueError,
    load_definition,
    resolve_parameters,
)
from servekit.services.pipelines.sagemaker.model import VERSION
from servekit.services.training.roles import RoleDocuments
from servekit.state.paging import InvalidNextToken

log = logging.getLogger(__name__)

VALIDATE_TIMEOUT_S = 60.0
LOG_TAIL_BYTES = 1500
_ID_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
_FORMAT = (
    "SageMaker's pipeline definition JSON (Version 2020-12-01, as the SDK's Pipeline.definition() writes) or "
    "servekit's (JSON or YAML with Name, Parameters and Steps, as docs/pipelines.md describes)"
)
# ListPipelineExecutionSteps' Metadata members servekit fills (a row's metadata may hold more, for itself)
_METADATA_KEYS = (
    "ProcessingJob",
    "TrainingJob",
    "TransformJob",
    "TuningJob",
    "Model",
    "RegisterModel",
    "Condition",
    "Fail",
)


class PipelinesApi:
    def __init__(
        self,
        repo: Pipelines,
        home: Path,
        account: Account | None = None,
        plane_url: Callable[[], str | None] = lambda: None,
        python: str = sys.executable,
        new_id: Callable[[], str] | None = None,
        executor: Executor | None = None,
        read_object: Callable[[str], bytes] | None = None,
        sessions: SessionKeys | None = None,
        role_documents: RoleDocuments | None = None,
    ) -> None:
        """``plane_url``: where register and deploy steps of servekit's format reach this plane (None: they fail
        and say so). ``executor`` runs SageMaker definitions (None: they are refused at StartPipelineExecution);
        ``read_object`` reads an ``s3://`` URI (PipelineDefinitionS3Location). ``sessions``: where each execution's
        role session comes from (its Function and command steps run with it, in the jobs' sandbox); None: steps run
        without the sandbox (a test's plane with no bubblewrap concerns)."""
        self.sessions = sessions
        self.repo = repo
        self.home = home
        self._account = account or Account()
        self._plane_url = plane_url
        self._python = python
        self._new_id = new_id or (lambda: "".join(secrets.choice(_ID_ALPHABET) for _ in range(12)))
        self.runs = RunProcesses(repo, home, self._account, plane_url, python, sessions, role_documents)
        self.executor = executor
        self._read_object = read_object

    def handlers(self) -> dict[str, Handler]:
        return {
            "CreatePipeline": self.create_pipeline,
            "UpdatePipeline": self.update_pipeline,
            "DescribePipeline": self.describe_pipeline,
            "ListPipelines": self.list_pipelines,
            "DeletePipeline": self.delete_pipeline,
            "StartPipelineExecution": self.start_pipeline_execution,
            "DescribePipelineExecution": self.describe_pipeline_execution,
            "ListPipelineExecutions": self.list_pipeline_executions,
            "ListPipelineExecutionSteps": self.list_pipeline_execution_steps,
            "StopPipelineExecution": self.stop_pipeline_execution,
            "RetryPipelineExecution": self.retry_pipeline_execution,
            "DescribePipelineDefinitionForExecution": self.describe_pipeline_definition_for_execution,
            "ListPipelineParametersForExecution": self.list_pipeline_parameters_for_execution,
        }

    # ---- background: executions end with the plane -------------------------------------------------------------

    def start(self) -> None:
        """Adopt the SageMaker executions a previous plane on this state left running."""
        if self.executor is not None:
            adopted = self.executor.adopt()
            if adopted:
                log.info("pipelines: resumed %d execution(s) a previous plane was running", len(adopted))

    async def close(self) -> None:
        """Stop the executions of servekit's format this plane started (SIGINT: each run stops its steps and ends
        Stopped); SageMaker executions stay Executing for the next plane to adopt."""
        await self.runs.close()
        if self.executor is not None:
            await self.executor.close()

    # ---- names ------------------------------------------------------------------------------------------------

    def pipeline_arn(self, name: str) -> str:
        return self._account.arn_of("pipeline", name)

    def definition_file(self, name: str) -> Path:
        return self.home / "pipelines" / "definitions" / f"{name}.json"

    def _definition(self, ref: str) -> DefinitionRow:
        row = self.repo.get_definition(ref)
        if row is None:
            raise resource_not_found(f"Pipeline '{ref}' does not exist.")
        return row

    # ---- pipelines --------------------------------------------------------------------------------------------

    async def create_pipeline(self, p: dict[str, Any]) -> dict[str, Any]:
        name = p["PipelineName"]
        text, doc = self._document(p)
        if self.repo.get_definition(name) is not None:
            raise validation_exception(f"Pipeline {self.pipeline_arn(name)} already exists.")
        if _is_sagemaker(doc):
            self._register(name, p, text, _parallelism(p))
            return {"PipelineArn": self.pipeline_arn(name)}
        if p.get("ParallelismConfiguration"):
            raise validation_exception(
                "ParallelismConfiguration is refused for servekit's format: MaxParallelExecutionSteps in the "
                "definition sets the parallelism"
            )
        if doc.setdefault("Name", name) != name:
            raise validation_exception(f"PipelineDefinition's Name {doc['Name']!r} is not PipelineName {name!r}")
        text = orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode()
        path = self.definition_file(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        candidate = path.with_name(f".{name}.{self._new_id()}.json")
        candidate.write_text(text)
        try:
            await self._validate(candidate)
            self._register(name, p, text)
            candidate.replace(path)  # registered: now the file its executions run
        finally:
            candidate.unlink(missing_ok=True)
        return {"PipelineArn": self.pipeline_arn(name)}

    def _register(self, name: str, p: dict[str, Any], text: str, parallelism: int | None = None) -> None:
        try:
            self.repo.create_definition(
                name=name,
                arn=self.pipeline_arn(name),
                display_name=p.get("PipelineDisplayName") or name,
                description=p.get("PipelineDescription") or "",
                role_arn=p["RoleArn"],
                definition=text,
                parallelism=parallelism,
            )
        except DefinitionExists:
            raise validation_exception(f"Pipeline {self.pipeline_arn(name)} already exists.") from None

    def _document(self, p: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The definition's text (given, or read from PipelineDefinitionS3Location) and its document; a SageMaker
        definition is checked here (ValidationException naming what is wrong)."""
        text = p.get("PipelineDefinition")
        location = p.get("PipelineDefinitionS3Location")
        if text and location:
            raise validation_exception("Give PipelineDefinition or PipelineDefinitionS3Location, not both")
        if location:
            text = self._read_location(location)
        if not text:
            raise validation_exception(f"PipelineDefinition or PipelineDefinitionS3Location is required: {_FORMAT}")
        if (depth := nesting_depth(text)) > MAX_DEPTH:
            raise validation_exception(
                f"PipelineDefinition nests {depth} levels deep; servekit reads definitions up to {MAX_DEPTH} levels"
            )
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise validation_exception(f"PipelineDefinition is not JSON or YAML ({exc}); expected {_FORMAT}") from None
        except RecursionError:  # nesting by indentation, which nesting_depth does not count
            raise validation_exception(f"PipelineDefinition nests too deep; expected {_FORMAT}") from None
        if not isinstance(doc, dict):
            raise validation_exception(f"PipelineDefinition must be a mapping: {_FORMAT}")
        if _is_sagemaker(doc) or "PipelineExperimentConfig" in doc:
            try:
                load_definition(doc)
            except DefinitionError as exc:
                raise validation_exception(str(exc)) from None
            except RecursionError:
                raise validation_exception("PipelineDefinition's expressions nest too deep") from None
        return text, doc

    def _read_location(self, location: dict[str, Any]) -> str:
        uri = f"s3://{location['Bucket']}/{location['ObjectKey']}"
        if self._read_object is None:
            raise validation_exception("PipelineDefinitionS3Location needs servekit up's S3; give PipelineDefinition")
        try:
            return self._read_object(uri).decode()
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            raise validation_exception(f"PipelineDefinitionS3Location {uri} cannot be read: {exc}") from None

    async def update_pipeline(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._definition(p["PipelineName"])
        changes: dict[str, str | int] = {}
        if p.get("ParallelismConfiguration"):
            if not _is_sagemaker(self._loaded(row)):
                raise validation_exception("ParallelismConfiguration is refused for servekit's format")
            changes["parallelism"] = int(p["ParallelismConfiguration"]["MaxParallelExecutionSteps"])
        if p.get("PipelineDefinition") or p.get("PipelineDefinitionS3Location"):
            text, doc = self._document(p)
            if not _is_sagemaker(doc):
                raise validation_exception(
                    "UpdatePipeline takes SageMaker's definition format; for servekit's, delete and create the "
                    "pipeline again (its executions run the file CreatePipeline checked)"
                )
            if not _is_sagemaker(self._loaded(row)):
                raise validation_exception(f"Pipeline {row.arn} is in servekit's format; delete and create it again")
            changes["definition"] = text
        for key, column in (
            ("PipelineDisplayName", "display_name"),
            ("PipelineDescription", "description"),
            ("RoleArn", "role_arn"),
        ):
            if p.get(key):
                changes[column] = p[key]
        self.repo.update_definition(row.name, **changes)
        return {"PipelineArn": row.arn}

    @staticmethod
    def _loaded(row: DefinitionRow) -> dict[str, Any]:
        doc = yaml.safe_load(row.definition)
        return doc if isinstance(doc, dict) else {}

    async def _validate(self, path: Path) -> None:
        proc = await asyncio.create_subprocess_exec(
            self._python,
            "-m",
            "servekit.services.pipelines.definition.validate",
            str(path),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            stdin=asyncio.subprocess.DEVNULL,
        )
        try:
            _, err = await asyncio.wait_for(proc.communicate(), VALIDATE_TIMEOUT_S)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise validation_exception(
                f"PipelineDefinition took over {VALIDATE_TIMEOUT_S:g}s to load (does a Function's module do work "
                "when imported?)"
            ) from None
        if proc.returncode != 0:
            reason = err.decode(errors="replace").strip().splitlines()
            tail = reason[-1] if reason else f"exit status {proc.returncode}"
            raise validation_exception(f"PipelineDefinition is not a valid pipeline: {tail}. Expected {_FORMAT}")

    def _describe_definition(self, row: DefinitionRow) -> dict[str, Any]:
        out: dict[str, Any] = {
            "PipelineArn": row.arn,
            "PipelineName": row.name,
            "PipelineDisplayName": row.display_name,
            "PipelineDefinition": row.definition,
            "RoleArn": row.role_arn,
            "PipelineStatus": "Active",
            "CreationTime": row.created,
            "LastModifiedTime": row.modified,
        }
        if row.description:
            out["PipelineDescription"] = row.description
        if row.last_run is not None:
            out["LastRunTime"] = row.last_run
        if row.parallelism is not None:
            out["ParallelismConfiguration"] = {"MaxParallelExecutionSteps": row.parallelism}
        return out

    async def describe_pipeline(self, p: dict[str, Any]) -> dict[str, Any]:
        if p.get("PipelineVersionId") not in (None, 1):
            raise validation_exception("servekit keeps one version of a pipeline: PipelineVersionId is 1")
        return self._describe_definition(self._definition(p["PipelineName"]))

    async def list_pipelines(self, p: dict[str, Any]) -> dict[str, Any]:
        try:
            page = self.repo.list_definitions(
                name_prefix=p.get("PipelineNamePrefix"),
                created_after=optional_epoch(p.get("CreatedAfter")),
                created_before=optional_epoch(p.get("CreatedBefore")),
                sort_by=p.get("SortBy") or "CreationTime",
                sort_order=p.get("SortOrder") or "Descending",
                max_results=p.get("MaxResults") or 50,
                next_token=p.get("NextToken"),
            )
        except (InvalidNextToken, ValueError) as exc:
            raise validation_exception(str(exc)) from None
        summaries = []
        for row in page.items:
            item: dict[str, Any] = {
                "PipelineArn": row.arn,
                "PipelineName": row.name,
                "PipelineDisplayName": row.display_name,
                "RoleArn": row.role_arn,
                "CreationTime": row.created,
                "LastModifiedTime": row.modified,
            }
            if row.description:
                item["PipelineDescription"] = row.description
            if row.last_run is not None:
                item["LastExecutionTime"] = row.last_run
            summaries.append(item)
        out: dict[str, Any] = {"PipelineSummaries": summaries}
        if page.next_token:
            out["NextToken"] = page.next_token
        return out

    async def delete_pipeline(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._definition(p["PipelineName"])
        self.repo.delete_definition(row.name)
        return {"PipelineArn": row.arn}

    # ---- executions -------------------------------------------------------------------------------------------

    async def start_pipeline_execution(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._definition(p["PipelineName"])
        doc = self._loaded(row)
        if _is_sagemaker(doc):
            return await self._start_sagemaker(row, doc, p)
        for unsupported in ("ParallelismConfiguration", "SelectiveExecutionConfig", "MlflowExperimentName"):
            if p.get(unsupported):
                raise validation_exception(f"{unsupported} is not supported by servekit's pipelines")
        if p.get("PipelineVersionId") not in (None, 1):
            raise validation_exception("servekit keeps one version of a pipeline: PipelineVersionId is 1")
        run_id = self._new_id()
        log_path = self.home / "pipelines" / "executions" / f"{run_id}.log"
        execution = self._record_execution(row, p, run_id, str(log_path))
        if execution.run_id != run_id:  # a retry with the same ClientRequestToken: the execution it started
            return {"PipelineExecutionArn": execution.arn}
        await self.runs.spawn(self.definition_file(row.name), execution, log_path, row.role_arn)
        return {"PipelineExecutionArn": execution.arn}

    def _record_execution(self, row: DefinitionRow, p: dict[str, Any], run_id: str, log: str) -> ApiExecutionRow:
        """The execution StartPipelineExecution asks for, or the one an earlier call with the same
        ClientRequestToken started (then its run id is not ``run_id``)."""
        return self.repo.add_api_execution(
            ApiExecutionRow(
                run_id=run_id,
                pipeline=row.name,
                arn=f"{row.arn}/execution/{run_id}",
                display_name=p.get("PipelineExecutionDisplayName") or f"execution-{run_id}",
                description=p.get("PipelineExecutionDescription") or "",
                parameters={str(x["Name"]): str(x["Value"]) for x in p.get("PipelineParameters") or []},
                token=p["ClientRequestToken"],
                created=0.0,
                pid=None,
                log=log,
                exit_code=None,
            )
        )

    async def _start_sagemaker(self, row: DefinitionRow, doc: dict[str, Any], p: dict[str, Any]) -> dict[str, Any]:
        if self.executor is None:
            raise validation_exception("this plane runs no SageMaker pipeline executions")
        try:
            return await self._begin_sagemaker(row, doc, p)
        except SelectionError as exc:
            raise validation_exception(str(exc)) from None

    async def _begin_sagemaker(self, row: DefinitionRow, doc: dict[str, Any], p: dict[str, Any]) -> dict[str, Any]:
        assert self.executor is not None
        if p.get("MlflowExperimentName"):
            raise validation_exception("MlflowExperimentName is not supported by servekit's pipelines")
        selective = self._selective(row, p.get("SelectiveExecutionConfig"))
        if p.get("PipelineVersionId") not in (None, 1):
            raise validation_exception("servekit keeps one version of a pipeline: PipelineVersionId is 1")
        definition, dag = load_definition(doc)
        if selective is not None:  # refused before anything is recorded
            select(definition, dag, {r.step: r for r in self.repo.steps(selective[0])}, selective[2])
        given = p.get("PipelineParameters") or []
        try:
            values = resolve_parameters(definition, given)
        except ParameterValueError as exc:
            raise validation_exception(str(exc)) from None
        parallel = _parallelism(p) or row.parallelism or DEFAULT_PARALLELISM  # the execution's, the pipeline's
        run_id = self._new_id()
        execution = self._record_execution(row, p, run_id, "")
        if execution.run_id == run_id:  # else a retry with the same ClientRequestToken: the execution it started
            self.executor.begin(
                run_id=run_id,
                arn=execution.arn,
                pipeline=row.name,
                pipeline_arn=row.arn,
                document=doc,
                parameters=values,
                max_parallel=int(parallel),
                selective=selective,
            )
        return {"PipelineExecutionArn": execution.arn}

    def _selective(self, row: DefinitionRow, config: dict[str, Any] | None) -> tuple[str, str, tuple[str, ...]] | None:
        """SelectiveExecutionConfig as the executor takes it: the source execution (of this pipeline, a SageMaker
        definition's), its ARN and the selected step names."""
        if not config:
            return None
        source_ref = config.get("SourcePipelineExecutionArn")
        if not source_ref:
            raise validation_exception("SelectiveExecutionConfig needs SourcePipelineExecutionArn here")
        source = self.repo.get_run(source_ref)
        if source is None or source.pipeline != row.name or source.source != SOURCE:
            raise validation_exception(
                f"SourcePipelineExecutionArn {source_ref} is no execution of pipeline {row.name}"
            )
        return source.run_id, source.arn, tuple(str(s["StepName"]) for s in config.get("SelectedSteps") or [])

    def _execution(self, ref: str) -> tuple[ApiExecutionRow | None, RunRow | None]:
        api = self.repo.get_api_execution(ref)
        run = self.repo.get_run(api.run_id if api is not None else ref)
        if api is None and run is None:
            raise resource_not_found(f"Pipeline execution '{ref}' does not exist.")
        return api, run

    def _status(self, api: ApiExecutionRow | None, run: RunRow | None) -> tuple[RunStatus, str]:
        """The execution's status and failure reason: the run's, unless its process ended without finishing it."""
        # gone: it exited, or (after a restart of this plane) its recorded process no longer runs; a pid not yet
        # recorded is a process being started
        ended = (
            api is not None
            and api.run_id not in self.runs.children
            and (api.exit_code is not None or (api.pid is not None and not pid_alive(api.pid)))
        )
        if run is not None and (RunStatus(run.status).finished or not ended):
            return RunStatus(run.status), run.failure_reason
        if not ended:
            return RunStatus.EXECUTING, ""  # its process is starting the run
        assert api is not None
        how = f"exit status {api.exit_code}" if api.exit_code is not None else "servekit up restarted meanwhile"
        return RunStatus.FAILED, f"its process ended ({how}) before the run finished{_tail(api.log)}"

    async def describe_pipeline_execution(self, p: dict[str, Any]) -> dict[str, Any]:
        api, run = self._execution(p["PipelineExecutionArn"])
        status, reason = self._status(api, run)
        arn = run.arn if run is not None else api.arn if api is not None else ""
        pipeline = run.pipeline if run is not None else api.pipeline if api is not None else ""
        out: dict[str, Any] = {
            "PipelineArn": self.pipeline_arn(pipeline),
            "PipelineExecutionArn": arn,
            "PipelineExecutionDisplayName": api.display_name if api is not None else f"execution-{run_id_of(arn)}",
            "PipelineExecutionStatus": status,
            "CreationTime": run.created if run is not None else api.created if api is not None else 0.0,
            "LastModifiedTime": run.modified if run is not None else api.created if api is not None else 0.0,
        }
        if api is not None and api.description:
            out["PipelineExecutionDescription"] = api.description
        if reason:
            out["FailureReason"] = reason
        selective = (run.definition.get("Selective") or {}) if run is not None and run.source == SOURCE else {}
        if selective:
            out["SelectiveExecutionConfig"] = {
                "SourcePipelineExecutionArn": selective["SourcePipelineExecutionArn"],
                "SelectedSteps": [{"StepName": n} for n in selective["SelectedSteps"]],
            }
        return out

    async def list_pipeline_executions(self, p: dict[str, Any]) -> dict[str, Any]:
        name = p["PipelineName"]
        definition = self.repo.get_definition(name)
        if definition is None and not self.repo.list_runs(pipeline=name, max_results=1).items:
            raise resource_not_found(f"Pipeline '{name}' does not exist.")
        name = definition.name if definition is not None else name
        if (p.get("SortBy") or "CreationTime") != "CreationTime":
            raise validation_exception("SortBy must be CreationTime")
        try:
            page = self.repo.list_runs(
                pipeline=name,
                sort_order=p.get("SortOrder") or "Descending",
                max_results=p.get("MaxResults") or 50,
                next_token=p.get("NextToken"),
            )
        except (InvalidNextToken, ValueError) as exc:
            raise validation_exception(str(exc)) from None
        api_rows = {a.run_id: a for a in self.repo.api_executions(name)}
        runs: list[tuple[ApiExecutionRow | None, RunRow | None]] = [(api_rows.get(r.run_id), r) for r in page.items]
        if not p.get("NextToken"):  # started, its run not written yet: on the first page
            have = {r.run_id for r in page.items}
            starting = [a for a in api_rows.values() if a.run_id not in have and self.repo.get_run(a.run_id) is None]
            runs = [(a, None) for a in starting] + runs
        after, before = optional_epoch(p.get("CreatedAfter")), optional_epoch(p.get("CreatedBefore"))
        summaries = []
        for api, run in runs:
            created = run.created if run is not None else api.created if api is not None else 0.0
            if (after is not None and created <= after) or (before is not None and created >= before):
                continue
            status, reason = self._status(api, run)
            arn = run.arn if run is not None else api.arn if api is not None else ""
            item: dict[str, Any] = {
                "PipelineExecutionArn": arn,
                "StartTime": created,
                "PipelineExecutionStatus": status,
                "PipelineExecutionDisplayName": api.display_name if api is not None else f"execution-{run_id_of(arn)}",
            }
            if api is not None and api.description:
                item["PipelineExecutionDescription"] = api.description
            if reason:
                item["PipelineExecutionFailureReason"] = reason
            summaries.append(item)
        out: dict[str, Any] = {"PipelineExecutionSummaries": summaries}
        if page.next_token:
            out["NextToken"] = page.next_token
        return out

    async def list_pipeline_execution_steps(self, p: dict[str, Any]) -> dict[str, Any]:
        if not p.get("PipelineExecutionArn"):
            raise validation_exception("PipelineExecutionArn is required")
        _, run = self._execution(p["PipelineExecutionArn"])
        rows = [] if run is None else self.repo.steps(run.run_id)
        rows.sort(
            key=lambda r: (r.started or 0.0, r.step), reverse=(p.get("SortOrder") or "Descending") == "Descending"
        )
        page, token = offset_page(rows, p.get("NextToken"), p.get("MaxResults") or 50)
        items = []
        for row in page:
            item: dict[str, Any] = {"StepName": row.step, "StepStatus": row.status, "AttemptCount": row.attempts}
            if row.started is not None:
                item["StartTime"] = row.started
            if row.ended is not None:
                item["EndTime"] = row.ended
            if row.failure_reason:
                item["FailureReason"] = row.failure_reason
            meta = dict(row.metadata or {})
            metadata = {k: meta[k] for k in _METADATA_KEYS if k in meta}
            props = dict(row.properties or {})
            if props.get("EndpointArn"):
                metadata["Endpoint"] = {"Arn": props["EndpointArn"]}
            if metadata:
                item["Metadata"] = metadata
            for key in ("CacheHitResult", "SelectiveExecutionResult"):
                if key in meta:
                    item[key] = meta[key]
            items.append(item)
        out: dict[str, Any] = {"PipelineExecutionSteps": items}
        if token is not None:
            out["NextToken"] = token
        return out

    async def stop_pipeline_execution(self, p: dict[str, Any]) -> dict[str, Any]:
        api, run = self._execution(p["PipelineExecutionArn"])
        for _ in range(100):  # just started: its process writes the run within moments
            if run is not None or (api is not None and api.exit_code is not None):
                break
            await asyncio.sleep(0.1)
            api, run = self._execution(p["PipelineExecutionArn"])
        status, _ = self._status(api, run)
        if run is None or status.finished:
            raise conflict(f"Pipeline execution {p['PipelineExecutionArn']} is {status}; only an executing one stops")
        if status is RunStatus.STOPPING:
            return {"PipelineExecutionArn": run.arn}
        try:
            if not owner_alive(run.owner_pid, run.owner_host):  # its process is gone: nobody else will stop it
                self.repo.set_run_status(
                    run.run_id,
                    RunStatus.STOPPED,
                    reason="stopped (its process was gone)",
                    final=True,
                    expected=[status],
                )
            else:  # its process polls for this and stops its steps
                self.repo.set_run_status(run.run_id, RunStatus.STOPPING, expected=[RunStatus.EXECUTING])
                if self.executor is not None:
                    self.executor.stop(run.run_id)
        except StaleRunStatus:
            raise conflict(f"Pipeline execution {run.arn} changed status meanwhile; describe it again") from None
        return {"PipelineExecutionArn": run.arn}

    async def retry_pipeline_execution(self, p: dict[str, Any]) -> dict[str, Any]:
        _, run = self._execution(p["PipelineExecutionArn"])
        if run is None or run.source != SOURCE or self.executor is None:
            raise validation_exception(
                "RetryPipelineExecution retries executions of SageMaker definitions; for servekit's format, "
                "`servekit pipeline resume` the run"
            )
        if run.status != RunStatus.FAILED:
            raise conflict(f"Pipeline execution {run.arn} is {run.status}; only a Failed one is retried")
        try:
            self.executor.resume(run.run_id, expected=(RunStatus.FAILED,))
        except StaleRunStatus:
            raise conflict(f"Pipeline execution {run.arn} changed status meanwhile; describe it again") from None
        return {"PipelineExecutionArn": run.arn}

    async def describe_pipeline_definition_for_execution(self, p: dict[str, Any]) -> dict[str, Any]:
        _, run = self._execution(p["PipelineExecutionArn"])
        if run is None:
            raise resource_not_found(f"Pipeline execution '{p['PipelineExecutionArn']}' has not started yet.")
        document = run.definition.get("Document", run.definition) if run.source == SOURCE else run.definition
        return {"PipelineDefinition": orjson.dumps(document).decode(), "CreationTime": run.created}

    async def list_pipeline_parameters_for_execution(self, p: dict[str, Any]) -> dict[str, Any]:
        _, run = self._execution(p["PipelineExecutionArn"])
        values = {} if run is None else run.parameters
        items = [{"Name": k, "Value": _parameter_text(v)} for k, v in sorted(values.items())]
        page, token = offset_page(items, p.get("NextToken"), p.get("MaxResults") or 50)
        out: dict[str, Any] = {"PipelineParameters": page}
        if token is not None:
            out["NextToken"] = token
        return out


def _parallelism(p: dict[str, Any]) -> int | None:
    value = (p.get("ParallelismConfiguration") or {}).get("MaxParallelExecutionSteps")
    return None if value is None else int(value)


def _is_sagemaker(doc: dict[str, Any]) -> bool:
    return str(doc.get("Version", "")) == VERSION


def _parameter_text(value: Any) -> str:
    """A parameter's value as SageMaker lists it: text, booleans lower-case."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def run_id_of(arn: str) -> str:
    return arn.rsplit("/", 1)[-1]


def _tail(path: str) -> str:
    tail = tail_text(path, LOG_TAIL_BYTES).strip()
    last = [line for line in tail.splitlines() if line.strip()][-3:]
    return f"; its log ({path}) ends: {' | '.join(last)}" if last else ""
