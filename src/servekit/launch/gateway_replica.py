"""The gateway replica's composition root (``servekit up --role gateway``): the leader's routes followed from the
state database, InvokeEndpoint served here, every other operation forwarded to the leader
(:class:`servekit.edge.replica.GatewayReplica` says why)."""

from __future__ import annotations

import os
import random
from pathlib import Path

from servekit.aws import Api, Credentials
from servekit.aws.names import Account
from servekit.edge.replica import GatewayReplica, NoInstances
from servekit.errors import ConfigError
from servekit.gateway.published import DEFAULT_POLL_S, RouteFollower
from servekit.gateway.service import Gateway, RoutingTable
from servekit.gateway.shadow import ShadowLog
from servekit.gateway.store import GatewayRoutes
from servekit.services.cloudwatch.store import MetricsStore
from servekit.services.database import StateDB
from servekit.services.hosting.api import HostingService
from servekit.services.hosting.artifacts import ArtifactResolver
from servekit.services.hosting.components import InferenceComponents
from servekit.services.hosting.envelopes import TableEnvelopes
from servekit.services.hosting.instance_types import load_instance_types
from servekit.services.hosting.orchestrator import Orchestrator
from servekit.storage import Storage


def build_replica(
    home: Path,
    *,
    instance_types_file: str | None = None,
    strict_output: bool = False,
    poll_s: float = DEFAULT_POLL_S,
    database_url: str | None = None,
) -> GatewayReplica:
    """A gateway replica of the leader that runs on ``home`` (the leader must have started there once: its
    address and metrics resolution are read from the state database), or on ``database_url``'s database."""
    db = StateDB.open(home, database_url=database_url)
    routes = GatewayRoutes(db.conn)
    leader = routes.leader()
    if leader is None:
        db.close()
        if database_url is not None:
            raise ConfigError(
                f"no leader has run on the database {db.where}: start `servekit up --database-url …` on it first "
                "(a gateway replica routes by what the leader records)"
            )
        raise ConfigError(
            f"no leader has run on the home {home}: start `servekit up --home {home}` first (a gateway replica "
            "routes by what the leader records)"
        )
    credentials = Credentials.load_or_create(home)
    table = RoutingTable()
    s3_endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    storage = Storage(options={"s3": {"endpoint_url": s3_endpoint}} if s3_endpoint else None)
    artifacts = ArtifactResolver(home / "models", storage=storage)

    def model_dir(url: str) -> str:  # a ModelDataUrl as a local servekit model directory
        return str(artifacts.resolve(url).base_path)

    gateway = Gateway(
        table,
        random.Random(),
        shadow_sink=ShadowLog(home / "shadow"),  # one O_APPEND write per record: safe beside the leader's
        resolve_artifact=model_dir,
        account_id=Account().account_id,
    )
    envelopes = TableEnvelopes(load_instance_types(instance_types_file))
    fleets = Orchestrator(  # runs nothing here: the leader's backend starts the instances
        db.hosting, NoInstances(), table, envelopes, model_dir, cpus=()
    )
    # read-only here: /metrics's endpoint gauges; its operations are the leader's
    hosting = HostingService(db.hosting, fleets, envelopes, Account())
    metrics = MetricsStore(db.metrics, resolution_s=leader.metrics_resolution_s)  # the leader's buckets
    # InferenceComponentName routes to the component's copies by the leader's published routes (none run here)
    hosting.components = InferenceComponents(
        db.inference_components, db.hosting, fleets, envelopes, table, Account(), metrics=metrics
    )
    follower = RouteFollower(routes, table, poll_s)
    api = Api(credentials, strict_output=strict_output, region=Account().region)  # the leader's region, as up's
    return GatewayReplica(api, hosting, gateway, follower, routes, metrics)
