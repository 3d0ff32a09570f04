"""The hosting aggregate's rows and refusals (see :mod:`servekit.services.hosting.store` for the repository), the queue
of asynchronous invocations (:class:`AsyncQueue`) and the inference components (:class:`InferenceComponentRepo`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from servekit.state.connection import Connection, transaction
from servekit.state.paging import Listing, Page, keyset_page, page_of

Kind = Literal["model", "endpoint-config", "endpoint", "inference-component"]


# ---- errors ------------------------------------------------------------------------------------------------------


class HostingStateError(Exception):
    """Base of the hosting repository's refusals; each carries the kind and name it is about."""

    def __init__(self, message: str, *, kind: Kind | None = None, name: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.name = name


class AlreadyExists(HostingStateError):
    """A create named a model, endpoint config or endpoint that exists (names compare ignoring case)."""


class NotFound(HostingStateError):
    """A change named something that does not exist."""


class StaleStatus(HostingStateError):
    """A status change expected the endpoint (or instance) in a status it is no longer in."""

    def __init__(self, message: str, *, kind: Kind | None = None, name: str = "", actual: str = "") -> None:
        super().__init__(message, kind=kind, name=name)
        self.actual = actual


# ---- rows --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    """A model's (primary) container: what the control plane needs to start an instance."""

    image: str = ""
    model_data_url: str = ""
    environment: Mapping[str, str] = field(default_factory=dict)
    mode: str = "SingleModel"  # or MultiModel

    def to_json(self) -> dict[str, Any]:
        return {
            "Image": self.image,
            "ModelDataUrl": self.model_data_url,
            "Environment": dict(self.environment),
            "Mode": self.mode,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ContainerSpec:
        return cls(
            image=str(doc.get("Image") or ""),
            model_data_url=str(doc.get("ModelDataUrl") or ""),
            environment={str(k): str(v) for k, v in (doc.get("Environment") or {}).items()},
            mode=str(doc.get("Mode") or "SingleModel"),
        )


@dataclass(frozen=True, slots=True)
class ModelRow:
    name: str
    arn: str
    created: float
    container: ContainerSpec
    record: dict[str, Any]  # the DescribeModel-ready record, as the API layer stored it


@dataclass(frozen=True, slots=True)
class EndpointConfigRow:
    name: str
    arn: str
    created: float
    variants: tuple[dict[str, Any], ...]  # ProductionVariants as given
    data_capture: dict[str, Any] | None  # DataCaptureConfig as given
    record: dict[str, Any]  # the DescribeEndpointConfig-ready record


@dataclass(frozen=True, slots=True)
class VariantState:
    """One production variant of an endpoint's serving fleet, as DescribeEndpoint reports it."""

    name: str
    current_weight: float
    desired_weight: float
    current_instance_count: int
    desired_instance_count: int

    def to_json(self) -> dict[str, Any]:
        return {
            "VariantName": self.name,
            "CurrentWeight": self.current_weight,
            "DesiredWeight": self.desired_weight,
            "CurrentInstanceCount": self.current_instance_count,
            "DesiredInstanceCount": self.desired_instance_count,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> VariantState:
        return cls(
            name=str(doc["VariantName"]),
            current_weight=float(doc["CurrentWeight"]),
            desired_weight=float(doc["DesiredWeight"]),
            current_instance_count=int(doc["CurrentInstanceCount"]),
            desired_instance_count=int(doc["DesiredInstanceCount"]),
        )


@dataclass(frozen=True, slots=True)
class EndpointRow:
    id: int  # unique over the database's life: a new endpoint of a deleted one's name gets another
    name: str
    arn: str
    config_name: str
    status: str
    failure_reason: str
    created: float
    last_modified: float
    pending_config_name: str | None  # the config an update is moving to, while it runs
    pending_since: float | None
    variants: tuple[VariantState, ...]
    record: dict[str, Any]  # what CreateEndpoint/UpdateEndpoint gave besides the above (DeploymentConfig, Tags)


@dataclass(frozen=True, slots=True)
class StatusChange:
    endpoint: str
    endpoint_id: int
    from_status: str | None  # None: the endpoint was created
    to_status: str
    reason: str
    at: float


@dataclass(frozen=True, slots=True)
class InstanceRow:
    instance_id: str
    endpoint: str
    config_name: str  # the fleet it belongs to: during a blue/green update two configs have instances
    variant: str
    instance_type: str
    state: str
    port: int | None
    handle: str  # the backend's handle: a pid for local processes, an actor or pod name elsewhere
    last_error: str
    created: float
    updated: float
    started: float | None
    ended: float | None


class Unset:
    """The default of fields a change leaves alone (None is a value: "no pending config")."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET = Unset()


# ---- asynchronous invocations ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AsyncInvocationRow:
    seq: int
    inference_id: str
    endpoint: str
    request: Mapping[str, Any]  # InvokeEndpointAsync's parameters, with the output and failure locations
    status: str  # Queued -> Running -> Completed | Failed (expired, timed out, the model's error)
    created: float
    expires: float
    error: str = ""


_ASYNC_COLUMNS = "seq, inference_id, endpoint, request, status, created, expires, error"


def _async_row(r: tuple[Any, ...]) -> AsyncInvocationRow:
    return AsyncInvocationRow(
        int(r[0]), str(r[1]), str(r[2]), orjson.loads(r[3]), str(r[4]), float(r[5]), float(r[6]), str(r[7])
    )


class AsyncQueue:
    """InvokeEndpointAsync's requests, durable: accepted once recorded here, taken oldest first per endpoint, and
    put back in the queue by a restarted plane when the one running them died."""

    def __init__(self, conn: Connection, clock: Callable[[], float] = time.time) -> None:
        self._db = conn
        self._clock = clock

    def add(self, inference_id: str, endpoint: str, request: Mapping[str, Any], ttl_s: float) -> AsyncInvocationRow:
        now = self._clock()
        with transaction(self._db):
            seq = self._db.execute(
                "INSERT INTO hosting_async_invocations (inference_id, endpoint, request, status, created, expires) "
                "VALUES (?, ?, ?, 'Queued', ?, ?) RETURNING seq",
                (inference_id, endpoint, orjson.dumps(dict(request)).decode(), now, now + ttl_s),
            ).fetchone()[0]
        return AsyncInvocationRow(int(seq), inference_id, endpoint, dict(request), "Queued", now, now + ttl_s)

    def queued(self, endpoint: str, limit: int) -> list[AsyncInvocationRow]:
        rows = self._db.execute(
            f"SELECT {_ASYNC_COLUMNS} FROM hosting_async_invocations WHERE status = 'Queued' AND endpoint = ? "
            "ORDER BY seq LIMIT ?",
            (endpoint, limit),
        ).fetchall()
        return [_async_row(r) for r in rows]

    def claim(self, seq: int) -> bool:
        """Queued -> Running (False: another taker had it)."""
        with transaction(self._db):
            return (
                self._db.execute(
                    "UPDATE hosting_async_invocations SET status = 'Running', started = ? "
                    "WHERE seq = ? AND status = 'Queued'",
                    (self._clock(), seq),
                ).rowcount
                == 1
            )

    def finish(self, seq: int, status: str, error: str = "") -> None:
        with transaction(self._db):
            self._db.execute(
                "UPDATE hosting_async_invocations SET status = ?, ended = ?, error = ? WHERE seq = ?",
                (status, self._clock(), error, seq),
            )

    def release(self, seq: int) -> None:
        """Running -> Queued: taken when no instance could run it (a variant scaling to zero); it waits its turn."""
        with transaction(self._db):
            self._db.execute(
                "UPDATE hosting_async_invocations SET status = 'Queued', started = NULL WHERE seq = ? AND status = "
                "'Running'",
                (seq,),
            )

    def requeue_running(self) -> int:
        """A plane starting: what its predecessor was running goes back to the queue (run again, in order)."""
        with transaction(self._db):
            return int(
                self._db.execute(
                    "UPDATE hosting_async_invocations SET status = 'Queued', started = NULL WHERE status = 'Running'"
                ).rowcount
            )

    def backlog(self) -> dict[str, int]:
        """Per endpoint, the requests queued or running (ApproximateBacklogSize)."""
        rows = self._db.execute(
            "SELECT endpoint, COUNT(*) FROM hosting_async_invocations WHERE status IN ('Queued', 'Running') "
            "GROUP BY endpoint"
        ).fetchall()
        return {str(e): int(n) for e, n in rows}

    def get(self, seq: int) -> AsyncInvocationRow | None:
        r = self._db.execute(f"SELECT {_ASYNC_COLUMNS} FROM hosting_async_invocations WHERE seq = ?", (seq,)).fetchone()
        return _async_row(r) if r else None


# ---- inference components ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InferenceComponentRow:
    seq: int
    name: str
    arn: str
    endpoint: str
    variant: str
    status: str  # hosting.component_rules.ComponentStatus's values; the legal moves are decided above
    failure_reason: str
    created: float
    last_modified: float
    desired_copies: int  # RuntimeConfig.CopyCount as last asked (by a request or Application Auto Scaling)
    record: dict[str, Any]  # Specification as given (ModelName, ComputeResourceRequirements), Tags left out


_IC_COLUMNS = "seq, name, arn, endpoint, variant, status, failure_reason, created, last_modified, copies, record"
_IC_SORT_COLUMNS = {"Name": "name", "CreationTime": "created", "Status": "status"}


def _ic_row(r: tuple[Any, ...]) -> InferenceComponentRow:
    return InferenceComponentRow(
        int(r[0]), str(r[1]), str(r[2]), str(r[3]), str(r[4]), str(r[5]), str(r[6]), float(r[7]), float(r[8]),
        int(r[9]), orjson.loads(r[10]),
    )  # fmt: skip


class InferenceComponentRepo:
    """The inference components of IC-based endpoints (hosting migration 4); names unique ignoring case. A status
    change is compare-and-set (``expected``) so a background result never overwrites a later request's."""

    def __init__(self, conn: Connection, clock: Callable[[], float] = time.time) -> None:
        self._db = conn
        self._clock = clock

    def create(
        self, name: str, arn: str, endpoint: str, variant: str, status: str, copies: int, record: Mapping[str, Any]
    ) -> InferenceComponentRow:
        now = self._clock()
        try:
            with transaction(self._db):
                self._db.execute(
                    f"INSERT INTO hosting_inference_components ({_IC_COLUMNS.removeprefix('seq, ')}) "
                    "VALUES (?, ?, ?, ?, ?, '', ?, ?, ?, ?)",
                    (name, arn, endpoint, variant, status, now, now, copies, orjson.dumps(dict(record)).decode()),
                )
        except Exception as exc:  # sqlite3 or psycopg's integrity error: the name is taken
            if "unique" not in str(exc).lower():
                raise
            raise AlreadyExists(f"inference component {name!r} exists", kind="inference-component", name=name) from None
        got = self.get(name)
        assert got is not None
        return got

    def get(self, name: str) -> InferenceComponentRow | None:
        r = self._db.execute(
            f"SELECT {_IC_COLUMNS} FROM hosting_inference_components WHERE name = ?", (name,)
        ).fetchone()
        return _ic_row(r) if r else None

    def all(self, endpoint: str | None = None) -> list[InferenceComponentRow]:
        """Every component (of ``endpoint``), oldest first: the order placement and recovery replay them in."""
        where, args = ("WHERE endpoint = ?", (endpoint,)) if endpoint is not None else ("", ())
        rows = self._db.execute(
            f"SELECT {_IC_COLUMNS} FROM hosting_inference_components {where} ORDER BY seq", args
        ).fetchall()
        return [_ic_row(r) for r in rows]

    def change(
        self,
        name: str,
        *,
        expected: tuple[str, ...] = (),
        status: str | None = None,
        failure_reason: str | None = None,
        copies: int | None = None,
        record: Mapping[str, Any] | None = None,
    ) -> InferenceComponentRow:
        """Set the given fields; with ``expected``, only from one of those statuses (else StaleStatus)."""
        sets: list[str] = ["last_modified = ?"]
        args: list[Any] = [self._clock()]
        for column, value in (("status", status), ("failure_reason", failure_reason), ("copies", copies)):
            if value is not None:
                sets.append(f"{column} = ?")
                args.append(value)
        if record is not None:
            sets.append("record = ?")
            args.append(orjson.dumps(dict(record)).decode())
        where = "name = ?" + (f" AND status IN ({', '.join('?' * len(expected))})" if expected else "")
        with transaction(self._db):
            changed = self._db.execute(
                f"UPDATE hosting_inference_components SET {', '.join(sets)} WHERE {where}", (*args, name, *expected)
            ).rowcount
        row = self.get(name)
        if row is None:
            raise NotFound(f"inference component {name!r} does not exist", kind="inference-component", name=name)
        if not changed:
            raise StaleStatus(
                f"inference component {name!r} is {row.status}",
                kind="inference-component",
                name=name,
                actual=row.status,
            )
        return row

    def delete(self, name: str) -> None:
        with transaction(self._db):
            self._db.execute("DELETE FROM hosting_inference_components WHERE name = ?", (name,))

    def page(self, listing: Listing) -> Page[InferenceComponentRow]:
        """ListInferenceComponents: keyset pages by Name, CreationTime or Status (bad values raise ValueError)."""
        rows = keyset_page(self._db, "hosting_inference_components", _IC_COLUMNS, _IC_SORT_COLUMNS, listing)
        return page_of(rows, _ic_row)
