"""The hosting aggregate's rows and refusals (see :mod:`servekit.state.hosting` for the repository)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["model", "endpoint-config", "endpoint"]


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
