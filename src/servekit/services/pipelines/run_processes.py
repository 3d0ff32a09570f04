"""The processes that run the executions of servekit's format ``servekit up`` starts: ``servekit pipeline run
<definition> --sandbox`` per execution, with a session of the pipeline's role for its steps (they run in the jobs'
sandbox: :mod:`servekit.services.pipelines.engine.step_sandbox`), revoked when the process ends."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path

import orjson

from servekit._utils.processes import stop_children
from servekit.aws.names import Account
from servekit.aws.policy import PolicyError
from servekit.aws.sessions import SessionKeys
from servekit.services.pipelines.engine.step_sandbox import STEP_ENVIRONMENT
from servekit.services.pipelines.runs.repo import ApiExecutionRow, Pipelines
from servekit.services.training.roles import RoleDocuments, role_policy

log = logging.getLogger(__name__)

STOP_GRACE_S = 10.0
RUN_SESSION_S = 7 * 86400.0  # an execution's role session, unless revoked first (when its run process ends)


class RunProcesses:
    """The run processes this plane started, by run id. ``sessions`` None: steps run without the sandbox (a test's
    plane that needs no boundary)."""

    def __init__(
        self,
        repo: Pipelines,
        home: Path,
        account: Account,
        plane_url: Callable[[], str | None],
        python: str,
        sessions: SessionKeys | None,
        role_documents: RoleDocuments | None = None,
    ) -> None:
        self.repo = repo
        self.home = home
        self.account = account
        self.plane_url = plane_url
        self.python = python
        self.sessions = sessions
        self.role_documents = role_documents  # the roles' policies in IAM
        self.children: dict[str, asyncio.subprocess.Process] = {}
        self._waiters: set[asyncio.Task[None]] = set()

    async def close(self) -> None:
        """SIGINT to every run still going (each stops its steps and ends Stopped), SIGKILL after the grace."""
        await stop_children(self.children.values(), STOP_GRACE_S, group=True)

    async def spawn(self, definition: Path, execution: ApiExecutionRow, log_path: Path, role_arn: str = "") -> None:
        """Start the run of ``execution`` (its output appended to ``log_path``) and record its process."""
        argv = [self.python, "-m", "servekit.cli.main", "pipeline", "run", str(definition)]
        argv += ["--home", str(self.home), "--run-id", execution.run_id, "--json"]
        url = self.plane_url()
        if url:
            argv += ["--url", url]
        argv += [f"--param={k}={v}" for k, v in execution.parameters.items()]
        env, key = dict(os.environ), None
        if self.sessions is not None:  # its steps in the jobs' sandbox, with the pipeline role's session
            key, steps = self._role_session(role_arn, definition, execution.run_id, url)
            argv += ["--sandbox"]
            env[STEP_ENVIRONMENT] = orjson.dumps(steps).decode()
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as out:  # the child keeps its own descriptor
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                stdin=asyncio.subprocess.DEVNULL,
                start_new_session=True,
                env=env,
            )
        self.children[execution.run_id] = proc
        self.repo.set_api_execution_process(execution.run_id, pid=proc.pid)

        async def reap() -> None:
            code = await proc.wait()
            if key is not None and self.sessions is not None:
                self.sessions.revoke(key)  # the session ends with the run
            self.repo.set_api_execution_process(execution.run_id, exit_code=code)
            self.children.pop(execution.run_id, None)

        task = asyncio.create_task(reap())
        self._waiters.add(task)
        task.add_done_callback(self._waiters.discard)

    def _role_session(
        self, role_arn: str, definition: Path, run_id: str, url: str | None
    ) -> tuple[str | None, dict[str, str]]:
        """A session for the pipeline's role (its policy as a job's role has it: services.training.roles, the
        definition's ``s3://`` URIs standing for a job's request) and the variables its steps get: the session's
        keys, this plane's endpoint and region. The key's id, to revoke when the run ends."""
        region = self.account.region
        steps = {"AWS_DEFAULT_REGION": region, "AWS_REGION": region}
        if url:
            steps["AWS_ENDPOINT_URL"] = url
        if self.sessions is None or not role_arn:
            return None, steps
        try:
            document = orjson.loads(definition.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            document = {}
        try:
            request = document if isinstance(document, dict) else {}
            policy = role_policy(self.home, role_arn, request, self.role_documents)
            key = self.sessions.mint(role_arn, f"SageMaker-Pipeline-{run_id}"[:64], policy, RUN_SESSION_S)
        except (PolicyError, ValueError) as exc:
            log.warning("pipeline execution %s: its steps get no session: its role %s: %s", run_id, role_arn, exc)
            return None, steps
        steps |= {
            "AWS_ACCESS_KEY_ID": key.access_key_id,
            "AWS_SECRET_ACCESS_KEY": key.secret_access_key,
            "AWS_SESSION_TOKEN": key.session_token or "",
        }
        return key.access_key_id, steps
