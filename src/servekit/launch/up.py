"""``servekit up``'s composition root: the control plane's services (state, credentials, backend, gateway, hosting,
CloudWatch, autoscaling, registry, jobs, console) built once, each handed its collaborators, and served."""

from __future__ import annotations

import functools
import logging
import os
import random
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn

from servekit.accelerators.nvml import NvmlReader
from servekit.accelerators.placement import GpuPool
from servekit.aws import AccessKey, Api, Credentials, Handler
from servekit.aws.errors import ApiError
from servekit.aws.models import service
from servekit.aws.names import Account
from servekit.aws.query import QueryService, signed_for
from servekit.aws.sessions import KeyChain, SessionKeys
from servekit.aws.sigv4 import Verifier
from servekit.backends.local import LocalProcessBackend, ReplicaBackend
from servekit.backends.ray_actors import RayBackend, RayBackendConfig
from servekit.backends.ray_job_hosts import RayJobHosts
from servekit.edge.async_invocations import AsyncInvocations
from servekit.edge.async_notifications import AsyncNotifications
from servekit.edge.capture_staging import CaptureShipper
from servekit.edge.metrics import EdgeMetrics
from servekit.edge.plane import Background, ControlPlane
from servekit.gateway.published import PublishedRoutingTable
from servekit.gateway.service import Gateway, RoutingTable
from servekit.gateway.shadow import ShadowLog
from servekit.gateway.store import GatewayRoutes
from servekit.launch.accept import fanned_out
from servekit.launch.console import console_for
from servekit.launch.gateway_replica import build_replica
from servekit.launch.http_stack import http_stack
from servekit.launch.logs import JobLogFiles, build_logs
from servekit.launch.plane_http import is_plane, plane_protocol
from servekit.launch.serve import bind
from servekit.services.autoscaling.api import AutoscalingApi
from servekit.services.autoscaling.runner import ACTION_PREFIX, DEFAULT_TICK_S, Autoscaler
from servekit.services.cloudwatch.alarms import AlarmService
from servekit.services.cloudwatch.metrics_api import CloudWatchMetrics
from servekit.services.cloudwatch.store import MetricsStore
from servekit.services.database import StateDB
from servekit.services.hosting.api import HostingService
from servekit.services.hosting.artifacts import ArtifactResolver
from servekit.services.hosting.components import SCALABLE_PREFIX, InferenceComponents, Scalables
from servekit.services.hosting.envelopes import TableEnvelopes
from servekit.services.hosting.instance_counts import InstanceCountSeries
from servekit.services.hosting.instance_types import load_instance_types
from servekit.services.hosting.orchestrator import Orchestrator
from servekit.services.hosting.pipeline import PipelineMetrics
from servekit.services.hosting.serverless import DEFAULT_IDLE_S
from servekit.services.hosting.utilization import UtilizationSampler, hosting_instances, hosting_variants
from servekit.services.iam.api import IamApi
from servekit.services.iam.api import documents as iam_documents
from servekit.services.kms.api import KmsApi
from servekit.services.kms.crypto import Master
from servekit.services.monitoring.schedules.api import MonitoringService
from servekit.services.monitoring.schedules.plans import Planner
from servekit.services.monitoring.schedules.scheduler import Scheduler
from servekit.services.pipelines.api import PipelinesApi
from servekit.services.pipelines.execution.executor import Executor
from servekit.services.pipelines.execution.services import ServiceCall
from servekit.services.processing.api import ProcessingJobsApi
from servekit.services.processing.runner import KIND as PROCESSING_KIND
from servekit.services.processing.runner import ProcessingRunner
from servekit.services.registry.api import RegistryService
from servekit.services.registry.packages import container_for
from servekit.services.s3.api import S3Service, is_s3_request
from servekit.services.s3.objects import Objects
from servekit.services.s3.store import ObjectStore, StoreError
from servekit.services.search.api import SearchApi
from servekit.services.sts.api import StsService, is_sts_request
from servekit.services.tagging.api import TaggingApi
from servekit.services.training.api import TrainingJobsApi
from servekit.services.training.hosts import JobEnvelope
from servekit.services.training.images import ImageTable
from servekit.services.training.metrics import NAMESPACE as TRAINING_METRICS
from servekit.services.training.network import SLIRP_HINT
from servekit.services.training.network import available as job_networks_available
from servekit.services.training.roles import role_policy
from servekit.services.training.runner import TrainingRunner
from servekit.services.training.sandbox import job_sandbox_problem
from servekit.services.transform.api import TransformJobsApi
from servekit.services.tuning.api import TuningJobsApi
from servekit.storage import Storage
from servekit.tools.recommend.api import RecommendationJobs

log = logging.getLogger("servekit")


def alarm_states(db: StateDB, names: Sequence[str]) -> dict[str, str]:
    """The states of the named CloudWatch alarms that exist (what a deployment's auto-rollback watches)."""
    return {n: row.state_value for n in names if (row := db.alarms.get(n)) is not None}


def scaled_variants(db: StateDB, endpoint: str) -> set[str]:
    """The endpoint's variants registered as Application Auto Scaling targets."""
    prefix = f"endpoint/{endpoint}/variant/"
    return {t.key[1][len(prefix) :] for t in db.autoscaling.targets("sagemaker") if t.key[1].startswith(prefix)}


def endpoint_variant_exists(db: StateDB, endpoint: str, variant: str) -> bool:
    """Whether the endpoint exists with that production variant (in its config, or the one an update moves to)."""
    row = db.hosting.get_endpoint(endpoint)
    if row is None:
        return False
    for name in (row.config_name, row.pending_config_name):
        config = db.hosting.get_endpoint_config(name) if name else None
        if config is not None and any(v.get("VariantName") == variant for v in config.variants):
            return True
    return any(v.name == variant for v in row.variants)


def default_bucket(account: Account) -> str:
    """The bucket the SageMaker SDK uses by default, named as AWS names it (``sagemaker-<region>-<account>``)."""
    return f"sagemaker-{account.region}-{account.account_id}"


S3_ENDPOINT_FILE = "s3-endpoint"  # in the home: the external S3 servekit up uses, for `servekit env`


def external_s3(given: str | None, env: Mapping[str, str], own_url: str | None) -> str | None:
    """The S3-compatible store servekit up reads other buckets from: ``--s3-endpoint``, else the endpoint AWS's
    variables name, unless that is this plane itself (a shell that ran ``eval "$(servekit env)"``)."""
    found = given or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if not found or (own_url is not None and found.rstrip("/") == own_url.rstrip("/")):
        return None
    return found.rstrip("/")


def s3_environment(url: str, key: AccessKey, account: Account) -> dict[str, str]:
    """What a job process needs to reach the plane with boto3 or s3fs: its S3, and every other service of the
    port (``AWS_ENDPOINT_URL``: a script's SageMaker, STS, CloudWatch clients reach this plane, not AWS)."""
    return {
        "AWS_ENDPOINT_URL_S3": url,
        "AWS_ENDPOINT_URL": url,
        "AWS_ACCESS_KEY_ID": key.access_key_id,
        "AWS_SECRET_ACCESS_KEY": key.secret_access_key,
        "AWS_DEFAULT_REGION": account.region,
    }


def s3_kms(kms: KmsApi) -> Callable[[str], str]:
    """S3's view of the plane's KMS: a usable key's ARN, or S3's error for it (``KMS.NotFoundException``, …)."""

    def arn(key_id: str) -> str:
        try:
            return kms.usable_arn(key_id)
        except ApiError as exc:
            raise StoreError(f"KMS.{exc.code}", exc.message, 400) from None

    return arn


def open_object_store(home: Path, account: Account) -> ObjectStore:
    """The home's S3 store, made whole after a crash, with the SDK's default bucket in it."""
    store = ObjectStore(home / "s3")
    repaired = store.reconcile()
    if any(repaired.values()):
        log.warning("S3 store: %(dropped)d index entries without a file dropped, %(refreshed)d re-read", repaired)
    store.create_bucket(default_bucket(account))
    return store


def build(
    home: Path,
    instance_types_file: str | None = None,
    strict_output: bool = False,
    metrics_resolution_s: int = 60,
    ray: RayBackendConfig | None = None,
    database_url: str | None = None,
    url: str | None = None,
    s3_endpoint: str | None = None,
    images_file: str | None = None,
    allow_installs: bool = False,
    serverless_idle_s: float = DEFAULT_IDLE_S,
    sns_webhooks: Mapping[str, str] | None = None,
) -> ControlPlane:
    """The plane on ``home``; ``url``: where it will listen (jobs it starts reach its S3 there); ``s3_endpoint``: an
    external S3-compatible store for ``s3://`` data outside the plane's own buckets (else AWS's variables name one);
    ``sns_webhooks``: SNS topic ARN -> the URL standing in for it (asynchronous inference's notifications)."""
    db = StateDB.open(home, database_url=database_url)
    credentials = Credentials.load_or_create(home)
    # jobs' role sessions (a key per job for its RoleArn), verified beside the home's keys on every API of the port
    sessions = SessionKeys()
    keys = KeyChain(credentials, sessions)
    backend: ReplicaBackend
    gpus: GpuPool | None = None  # the machine's GPUs, held by endpoints' instances and jobs' hosts alike
    if ray is None:
        local = backend = LocalProcessBackend(home / "instances")
        gpus = local.gpus
        reaped = local.reap_orphans()
        if reaped:
            log.warning("stopped %d instance(s) left running by a previous servekit up: %s", len(reaped), reaped)
    else:  # --backend ray: instances are actors on the cluster (they end with this process, owned by it)
        backend = RayBackend(ray, home / "instances")
    # every routing change is also recorded for gateway replicas (servekit up --role gateway); a starting leader
    # routes nowhere until it recovers, and its replicas hear that too
    routes = GatewayRoutes(db.conn)
    routes.clear()
    table: RoutingTable = PublishedRoutingTable(routes)
    # s3:// model data from an S3-compatible store (MinIO, moto): the endpoint AWS's own variables name
    s3_endpoint = external_s3(s3_endpoint, os.environ, url)
    storage = Storage(options={"s3": {"endpoint_url": s3_endpoint}} if s3_endpoint else None)
    account = Account()  # the account and region of every ARN this plane issues
    # IAM's roles: what a role's sessions may do (jobs', pipelines', transform runs', AssumeRole's), and the SDK's
    # execution role, made with the home
    iam = IamApi(db.iam_roles, account)
    iam.ensure_default_role()
    role_documents = functools.partial(iam_documents, db.iam_roles)
    kms = KmsApi(db.kms_keys, Master(home), account)  # its keys, for its API and S3's aws:kms encryption
    objects = open_object_store(home, account)
    # s3:// model data in the plane's own store is read from disk; other buckets through `storage`
    artifacts = ArtifactResolver(home / "models", storage=storage, local_objects=objects.local_path)

    def model_dir(url: str) -> str:  # a ModelDataUrl as a local servekit model directory
        return str(artifacts.resolve(url).base_path)

    states = functools.partial(alarm_states, db)  # what a deployment's auto-rollback watches
    gateway = Gateway(
        table,
        random.Random(),
        shadow_sink=ShadowLog(home / "shadow"),
        resolve_artifact=model_dir,  # multi-model TargetModels
        account_id=account.account_id,
    )
    # What InvokeEndpoint records; CloudWatch, alarms, the autoscaler and the utilization sampler read or fill it.
    # /metrics's series come first: hosting reports each instance's setup time there (and to CloudWatch's store).
    endpoint_metrics = MetricsStore(db.metrics, resolution_s=metrics_resolution_s)
    prometheus = EdgeMetrics(endpoint_metrics)
    instance_types = load_instance_types(instance_types_file)  # read once: hosting and recommendations share it
    envelopes = TableEnvelopes(instance_types)
    # Data capture to the plane's own buckets, done by the plane as SageMaker's platform does it: instances (no
    # credentials for this store, an isolated one no network to it) write into a staging folder under the home,
    # and the shipper puts each finished file into the store as an object. Ray's actors may run on other machines,
    # which cannot write into this home: they keep publishing to the URI themselves.
    shipper = CaptureShipper(
        home / "capture-staging",
        own_bucket=lambda bucket: objects.bucket_created(bucket) is not None,
        put=Objects(objects).put_file,
    )
    fleets = Orchestrator(
        db.hosting,
        backend,
        table,
        envelopes,
        model_dir,
        account,
        cpus=() if ray is not None else None,  # Ray's nodes are not this machine's CPUs to pin
        on_instance_ready=prometheus.record_instance_ready,
        alarm_states=states,
        preload=gateway.preload,
        framework_dir=home / "models" / "framework",  # framework models (SAGEMAKER_PROGRAM) composed here
        serverless_idle_s=serverless_idle_s,
        pipeline_dir=home / "models" / "pipeline",  # OPTION_PIPELINE_PARALLEL_DEGREE: models split into stages
        capture_destination=shipper.destination if ray is None else None,
    )
    hosting = HostingService(
        db.hosting,
        fleets,
        envelopes,
        account,
        alarm_states=states,
        scaled_variants=lambda endpoint: scaled_variants(db, endpoint),
        model_packages=functools.partial(container_for, db.registry),  # CreateModel's ModelPackageName
    )
    # Inference components: several models' copies on an IC-based endpoint's instances, each scaled on its own
    components = InferenceComponents(
        db.inference_components, db.hosting, fleets, envelopes, table, account, metrics=endpoint_metrics
    )
    hosting.components = components
    fleets.ic_instances = components.instances_of  # DescribeEndpoint's cost counts the instances copies use
    # GPU instances' GPUUtilization/GPUMemoryUtilization through NVML when the gpu extra (nvidia-ml-py) is installed
    sampler = UtilizationSampler(
        lambda: hosting_instances(fleets.controllers), endpoint_metrics, disk_path=home, gpus=NvmlReader.open()
    )
    endpoint_metrics.live_variants = lambda: hosting_variants(fleets.controllers)  # an idle variant publishes zeros
    # The scaler reads periods of the store's resolution (time compressed when it is under a minute) and looks
    # no less often than new datapoints arrive; alarms hand it their step-policy actions.
    resolution = endpoint_metrics.resolution_s
    scaler = Autoscaler(
        db.autoscaling,
        Scalables(hosting, components),  # endpoint variants, and inference components' copies
        endpoint_metrics,
        period_s=resolution,
        tick_s=min(DEFAULT_TICK_S, resolution),
    )
    alarms = AlarmService(
        db.alarms,
        endpoint_metrics,
        account,
        action_handlers={ACTION_PREFIX: scaler.alarm_action},
        resolution_s=metrics_resolution_s,
    )
    scaler.alarms = alarms  # target-tracking policies' AlarmHigh/AlarmLow, listed by DescribeAlarms as on AWS
    cloudwatch = {**alarms.handlers(), **CloudWatchMetrics(endpoint_metrics).handlers()}
    # Inference Recommender jobs: measure a model on instances of their own, reports under the home
    recommender = RecommendationJobs(
        db.recommend_jobs,
        db.hosting,
        model_dir,
        instance_types,
        home / "recommendations",
    )
    # Model registry: package groups, versions and their approval; deploy on approval through hosting's operations
    registry = RegistryService(db.registry, hosting.handlers(), account)
    # Model Monitor: job definitions, schedules on endpoints, executions of `servekit monitor` on their capture; a
    # baseline in the plane's own S3 store (a baselining job's output) is read from the store's files; outputs to an
    # s3:// URI of that store are written under the home, then put into the store as objects
    planner = Planner(
        db.monitoring, db.hosting, account, objects.local_path, put=Objects(objects).put_file,
        scratch=home / "monitoring-outputs", baselining_output=functools.partial(baselining_output, db),
    )  # fmt: skip
    scheduler = Scheduler(db.monitoring, planner, endpoint_metrics, account)
    monitoring = MonitoringService(db.monitoring, planner, scheduler, account)
    # Pipelines: SageMaker's definitions run in this process, each step calling the operations below (the table is
    # filled once every service is built); servekit's own format runs as `servekit pipeline run` subprocesses
    sagemaker_ops: dict[str, Handler] = {}
    plane_objects = Objects(objects, storage)
    pipeline_executor = Executor(
        db.pipelines, ServiceCall(service("sagemaker"), lambda: sagemaker_ops), plane_objects.read
    )
    pipelines_api = PipelinesApi(
        db.pipelines,
        home,
        account,
        plane_url=lambda: _leader_url(routes),
        executor=pipeline_executor,
        read_object=plane_objects.read,
        sessions=sessions,
        role_documents=role_documents,
    )
    # Batch transform jobs: those `servekit transform run` records in this home; Create runs one as a subprocess
    # (their s3:// input and output in the plane's own store, unless servekit up itself was pointed at another S3)
    job_env = {} if s3_endpoint or url is None else s3_environment(url, credentials.admin, account)
    transform_jobs = TransformJobsApi(
        db.transform_jobs,
        db.hosting,
        model_dir,
        home,
        account,
        environment=job_env,
        sessions=sessions,
        role_documents=role_documents,
        namespaces=database_url is None,  # a run in a namespace reaches the plane only, not a database server
        compose=fleets.framework.batch_model_dir,  # a first-party algorithm's or TF Serving's model, composed
    )
    # CloudWatch Logs: the instances' and transform jobs' output, shipped into SageMaker's log groups
    logs, log_shipper = build_logs(db, home, account, fleets.controllers, os.environ, database_url)
    scheduler.logs = JobLogFiles(log_shipper)  # monitoring executions log into /aws/sagemaker/ProcessingJobs
    # Training jobs: scripts in a bubblewrap sandbox that shows them /opt/ml; channels linked from the plane's S3
    # Images jobs may name: SageMaker's framework images, and the user's (<home>/images.yaml, then --images)
    images = ImageTable([home / "images.yaml", *([Path(images_file)] if images_file else [])])
    images.entries()  # a malformed file is an error now, not at the first job
    jobs_problem = job_sandbox_problem(sys.executable, home)
    if jobs_problem is not None:  # said once now; each job fails with the same reason
        log.warning("training and processing jobs cannot run: %s", jobs_problem)
    elif job_networks_available() and shutil.which("slirp4netns") is None:
        log.warning("jobs without EnableNetworkIsolation reach this plane but not the internet: %s", SLIRP_HINT)
    hosting.image_mapped = lambda uri: images.resolve(uri) is not None  # CreateModel's Image check

    # With --backend ray, jobs' hosts are Ray actors on the cluster the endpoints' backend connected to
    job_hosts = RayJobHosts(ray) if ray is not None else None

    def job_envelope(instance_type: str) -> JobEnvelope | None:  # a job's instance type, as endpoints see it
        e = envelopes.envelope(instance_type)
        return None if e is None else JobEnvelope(instance_type, e.vcpus, e.memory_bytes, e.gpus)

    training_runner = TrainingRunner(
        db.sagemaker_jobs,
        home,
        Objects(objects, storage),
        JobLogFiles(log_shipper),
        sys.executable,
        job_env,
        envelopes=job_envelope,
        images=images,
        launch=job_hosts,
        metrics=lambda job, metric, value, at: endpoint_metrics.record(
            TRAINING_METRICS, metric, (("TrainingJobName", job),), value, at
        ),
        allow_installs=allow_installs,
        gpus=gpus,
        sessions=sessions,
        role_documents=role_documents,
    )
    training = TrainingJobsApi(db.sagemaker_jobs, training_runner, account)
    processing_runner = ProcessingRunner(
        db.sagemaker_jobs,
        home,
        Objects(objects, storage),
        JobLogFiles(log_shipper),
        sys.executable,
        job_env,
        envelopes=job_envelope,
        images=images,
        launch=job_hosts,
        gpus=gpus,
        sessions=sessions,
        role_documents=role_documents,
    )
    # (Model Monitor's executions are processing jobs too: DescribeProcessingJob of one goes to monitoring)
    processing = ProcessingJobsApi(
        db.sagemaker_jobs, processing_runner, account, monitoring.handlers()["DescribeProcessingJob"]
    )
    tuning = TuningJobsApi(db.sagemaker_jobs, training, account)  # launches training jobs through `training`
    # SageMaker's operations, one service per line: hosting's first, then each service that adds operations
    sagemaker_ops.update(
        {
            **hosting.handlers(),
            **components.handlers(),
            **recommender.handlers(),
            **registry.handlers(),
            **monitoring.handlers(),
            **pipelines_api.handlers(),
            **transform_jobs.handlers(),
            **training.handlers(),
            **processing.handlers(),
            **tuning.handlers(),
        }
    )
    # Tags of every resource: each Create*'s Tags kept by the new ARN; AddTags/ListTags/DeleteTags for any ARN
    tagging = TaggingApi(db.tags, dict(sagemaker_ops))
    sagemaker_ops.update({**tagging.recording(sagemaker_ops), **tagging.handlers()})
    sagemaker_ops.update(SearchApi(dict(sagemaker_ops), lambda arn: db.tags.get(arn) or []).handlers())
    # Asynchronous inference: InvokeEndpointAsync's durable queue, run through the gateway, answers into S3
    async_invocations = AsyncInvocations(
        db.async_invocations,
        db.hosting,
        gateway,
        plane_objects,
        endpoint_metrics,
        notifications=AsyncNotifications(sns_webhooks or {}, account.region, endpoint_metrics),
    )
    background: list[Background] = [
        log_shipper,  # first: closed last, after the jobs it reads have stopped
        async_invocations,
        components,  # replaces dead copies; stops them at close
        scaler,
        sampler,
        PipelineMetrics(lambda: fleets.controllers, endpoint_metrics),  # stage compute/idle time, PipelineUtil
        # desired and current instances per variant as a metric series (the console's autoscaling chart)
        InstanceCountSeries(lambda: list(fleets.controllers), hosting.describe_endpoint, endpoint_metrics),
        recommender,
        scheduler,
        pipelines_api,
        transform_jobs,
        training,
        processing,
        tuning,
    ]
    return ControlPlane(
        Api(keys, strict_output=strict_output, region=account.region),
        hosting,
        gateway,
        services={
            "sagemaker": sagemaker_ops,
            "cloudwatch": cloudwatch,
            "kms": kms.handlers(),
            "application-autoscaling": AutoscalingApi(
                db.autoscaling,
                account,
                variant_exists=lambda endpoint, variant: (
                    components.exists(endpoint.removeprefix(SCALABLE_PREFIX))
                    if endpoint.startswith(SCALABLE_PREFIX)
                    else endpoint_variant_exists(db, endpoint, variant)
                ),
                asynchronous=lambda endpoint: async_invocations.config_of(endpoint) is not None,  # may scale to 0
            ).handlers(),
            "logs": logs.handlers(),
            "sagemaker-runtime": {"InvokeEndpointAsync": async_invocations.submit},
        },
        before_invoke=async_invocations.refuse_sync,
        drains=[shipper],  # closed after the instances stop: it ships the capture files they publish as they go
        alarms=alarms,
        endpoint_metrics=endpoint_metrics,
        background=background,
        prometheus=prometheus,
        collectors=[sampler],  # per-instance utilization gauges on /metrics
        # the web console (docs/console.md) calls the plane's own API
        mounts={"/console": lambda plane: console_for(plane, credentials, resolution)},
        # S3 (bodies streamed to disk) and STS (the query protocol) on the same port, by their SigV4 scope
        fronts=[
            (is_s3_request, S3Service(objects, Verifier(keys, region=account.region), account.region, s3_kms(kms))),
            (
                is_sts_request,
                StsService(
                    account,
                    Verifier(keys, region=account.region),
                    db.iam_roles,
                    sessions,
                    lambda arn: role_policy(home, arn, {}, role_documents),
                ),
            ),
            # IAM is global: its requests are signed for us-east-1 whatever the plane's region
            (signed_for("iam"), QueryService("iam", iam.handlers(), Verifier(keys, region="us-east-1"))),
        ],
    )


@dataclass(frozen=True)
class Prepared:
    """A plane built and ready to serve, and what the command prints before it serves (the CLI prints)."""

    app: Any
    banner: str


def prepare_leader(
    home: Path,
    host: str,
    port: int,
    instance_types_file: str | None = None,
    metrics_resolution_s: int = 60,
    ray: RayBackendConfig | None = None,
    database_url: str | None = None,
    s3_endpoint: str | None = None,
    images_file: str | None = None,
    allow_installs: bool = False,
    serverless_idle_s: float = DEFAULT_IDLE_S,
    sns_webhooks: Mapping[str, str] | None = None,
) -> Prepared:
    """``servekit up``: the plane built on ``home``, recorded as the leader that gateway replicas follow."""
    first = not (home / "credentials.json").exists()
    reach = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    plane = build(
        home,
        instance_types_file,
        metrics_resolution_s=metrics_resolution_s,
        ray=ray,
        database_url=database_url,
        url=f"http://{f'[{reach}]' if ':' in reach else reach}:{port}",
        s3_endpoint=s3_endpoint,
        images_file=images_file,
        allow_installs=allow_installs,
        serverless_idle_s=serverless_idle_s,
        sns_webhooks=sns_webhooks,
    )
    external = external_s3(s3_endpoint, os.environ, f"http://{f'[{reach}]' if ':' in reach else reach}:{port}")
    record = home / S3_ENDPOINT_FILE
    if external:  # `servekit env` points AWS_ENDPOINT_URL_S3 there
        record.write_text(external + "\n")
    else:
        record.unlink(missing_ok=True)
    key = Credentials.load_or_create(home).first("admin")
    url = f"http://{host}:{port}"
    record_leader(home, host, port, metrics_resolution_s, database_url)
    lines = (
        [f"servekit up: new home {home}; its admin key is in {home / 'credentials.json'} (mode 0600)."] if first else []
    )
    lines.append(
        "To point boto3, the AWS CLI and the SageMaker Python SDK at this plane (SageMaker, S3, STS, CloudWatch, "
        "Logs, Application Auto Scaling on this one port):\n"
        f'  eval "$(servekit env --home {home})"\n'
        f"(it exports AWS_ENDPOINT_URL={url}, the key AWS_ACCESS_KEY_ID={key.access_key_id} with its secret from "
        f"{home / 'credentials.json'}, AWS_DEFAULT_REGION=us-east-1 and SAGEMAKER_USER_CONFIG_OVERRIDE)"
    )
    if host not in ("127.0.0.1", "localhost", "::1"):
        log.warning("servekit up listens on %s: every caller still needs a signed request (SigV4)", host)
    return Prepared(plane, "\n".join(lines))


def _leader_url(routes: GatewayRoutes) -> str | None:
    """This plane's URL as record_leader wrote it (what a pipeline execution's register and deploy steps call)."""
    leader = routes.leader()
    return leader.url if leader is not None else None


def record_leader(home: Path, host: str, port: int, metrics_resolution_s: int, database_url: str | None = None) -> None:
    """Where gateway replicas forward control operations (a wildcard address is reached on loopback: replicas
    share this host's SQLite file, so they run here; with a database URL give ``--host`` an address they reach)."""
    reach = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    reach = f"[{reach}]" if ":" in reach else reach
    with StateDB.open(home, database_url=database_url) as db:
        GatewayRoutes(db.conn).record_leader(f"http://{reach}:{port}", metrics_resolution_s, os.getpid())


def prepare_gateway_replica(
    home: Path,
    host: str,
    port: int,
    instance_types_file: str | None = None,
    database_url: str | None = None,
) -> Prepared:
    """``servekit up --role gateway``: InvokeEndpoint on this port from the leader's routes, every other
    operation forwarded to the leader (servekit.edge.replica)."""
    plane = build_replica(home, instance_types_file=instance_types_file, database_url=database_url)
    return Prepared(
        plane, f"servekit up --role gateway: a gateway replica of the leader on {home}, at http://{host}:{port}"
    )


def serve(app: Any, host: str, port: int, log_level: str) -> None:
    """Serve a plane (the leader or a gateway replica) until stopped."""
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    stack = http_stack()
    sock = bind(host, port)  # ConfigError when the port is taken: said before anything starts
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        loop=stack.loop,
        lifespan="on",
        log_level=log_level,
        access_log=False,
        server_header=False,
        date_header=False,
        proxy_headers=False,  # no proxy-header rewriting on every request: servekit up reads none of them
        # InvokeEndpoint answered without the ASGI cycle (launch/plane_http.py), where httptools parses
        http=plane_protocol(app) if stack.http == "httptools" and is_plane(app) else stack.http,
    )
    # Each listening socket under several descriptors: a burst of InvokeEndpoint clients is accepted in one loop
    # turn (launch/accept.py).
    uvicorn.Server(config).run(sockets=fanned_out([sock], stack.loop))


def baselining_output(db: StateDB, job: str) -> str | None:
    """A processing job's first output S3Uri (a baselining job's: DefaultModelMonitor.suggest_baseline's
    statistics.json and constraints.json are there), for a schedule that names only its BaseliningJobName."""
    row = db.sagemaker_jobs.get(PROCESSING_KIND, job)
    outputs = ((row.request.get("ProcessingOutputConfig") or {}).get("Outputs") or []) if row is not None else []
    uri = (outputs[0].get("S3Output") or {}).get("S3Uri") if outputs else None
    return str(uri) if uri else None
