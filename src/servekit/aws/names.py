"""SageMaker's name rules and ARNs.

Names are checked before anything else touches them: a name that passes is ASCII letters, digits and hyphens, so it
is safe as a path segment, a metric label or a log field. Messages follow the service's own
(``1 validation error detected: Value 'x' at 'endpointName' failed to satisfy constraint: ...``), since the API
returns them as a ``ValidationException`` as they are.

ARNs are ``arn:aws:sagemaker:<region>:<account>:<kind>/<name>`` with the name **lowercased**: SageMaker builds
its resource ARNs that way (``MyEndpoint`` has the ARN ``...:endpoint/myendpoint``), which is also why names of
one kind are unique ignoring case. The account and region are local fictions that a deployment configures
(:class:`Account`); the defaults are LocalStack's all-zero account and ``us-east-1``.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

MAX_NAME_LENGTH = 63

# Endpoint, endpoint config, production variant (and transform job) names.
ENDPOINT_NAME_PATTERN = r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}"
# Model names may not end with a hyphen either, but the pattern bounds no run of characters: the length does.
MODEL_NAME_PATTERN = r"^[a-zA-Z0-9]([\-a-zA-Z0-9]*[a-zA-Z0-9])?"

_ENDPOINT_NAME = re.compile(ENDPOINT_NAME_PATTERN)
_MODEL_NAME = re.compile(MODEL_NAME_PATTERN)
_ACCOUNT = re.compile(r"[0-9]{12}")
_REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-[0-9]+")

DEFAULT_ACCOUNT_ID = "000000000000"
DEFAULT_REGION = "us-east-1"


class InvalidName(ValueError):
    """A name (or ARN) that breaks SageMaker's rules; ``message`` is the service's wording."""

    def __init__(self, message: str, *, field: str, value: object) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.value = value


class ResourceKind(enum.StrEnum):
    """The kinds of resources whose ARNs the hosting control plane issues (the ARN's resource type)."""

    MODEL = "model"
    ENDPOINT_CONFIG = "endpoint-config"
    ENDPOINT = "endpoint"


# The API's member name of each kind's name, for messages.
FIELDS: dict[ResourceKind, str] = {
    ResourceKind.MODEL: "modelName",
    ResourceKind.ENDPOINT_CONFIG: "endpointConfigName",
    ResourceKind.ENDPOINT: "endpointName",
}


def _refuse(field: str, value: object, constraint: str) -> InvalidName:
    shown = value if isinstance(value, str) else repr(value)
    return InvalidName(
        f"1 validation error detected: Value '{shown}' at '{field}' failed to satisfy constraint: {constraint}",
        field=field,
        value=value,
    )


def _check(value: object, field: str, pattern: re.Pattern[str], shown_pattern: str) -> str:
    if not isinstance(value, str):
        raise _refuse(field, value, "Member must be a string")
    if len(value) > MAX_NAME_LENGTH:  # first: the pattern never runs on long input
        raise _refuse(field, value, f"Member must have length less than or equal to {MAX_NAME_LENGTH}")
    if not value:
        raise _refuse(field, value, "Member must have length greater than or equal to 1")
    if pattern.fullmatch(value) is None:  # fullmatch: '$' alone would accept a trailing newline
        raise _refuse(field, value, f"Member must satisfy regular expression pattern: {shown_pattern}")
    return value


def check_endpoint_name(value: object, field: str = "endpointName") -> str:
    """``value`` when it is a valid endpoint name; :class:`InvalidName` otherwise."""
    return _check(value, field, _ENDPOINT_NAME, ENDPOINT_NAME_PATTERN)


def check_endpoint_config_name(value: object, field: str = "endpointConfigName") -> str:
    return _check(value, field, _ENDPOINT_NAME, ENDPOINT_NAME_PATTERN)


def check_variant_name(value: object, field: str = "variantName") -> str:
    return _check(value, field, _ENDPOINT_NAME, ENDPOINT_NAME_PATTERN)


def check_model_name(value: object, field: str = "modelName") -> str:
    return _check(value, field, _MODEL_NAME, MODEL_NAME_PATTERN)


def check_name(kind: ResourceKind, value: object, field: str | None = None) -> str:
    """The rule of ``kind`` (models have their own; endpoints and endpoint configs share one)."""
    shown = field or FIELDS[kind]
    if kind is ResourceKind.MODEL:
        return check_model_name(value, shown)
    return _check(value, shown, _ENDPOINT_NAME, ENDPOINT_NAME_PATTERN)


@dataclass(frozen=True, slots=True)
class Account:
    """The account and region this control plane pretends to be: they appear in every ARN it issues."""

    account_id: str = DEFAULT_ACCOUNT_ID
    region: str = DEFAULT_REGION
    partition: str = "aws"

    def __post_init__(self) -> None:
        if _ACCOUNT.fullmatch(self.account_id) is None:
            raise ValueError(f"an account id is 12 digits, not {self.account_id!r}")
        if _REGION.fullmatch(self.region) is None:
            raise ValueError(f"{self.region!r} is not a region name (like us-east-1)")
        if self.partition not in ("aws", "aws-cn", "aws-us-gov"):
            raise ValueError(f"{self.partition!r} is not an AWS partition")

    def arn(self, kind: ResourceKind, name: str) -> str:
        """The ARN of the resource ``name`` of ``kind`` (checked against the kind's rule, lowercased)."""
        check_name(kind, name)
        return self.arn_of(kind, name)

    def arn_of(self, kind: str, name: str) -> str:
        """SageMaker's ARN form for any resource kind (``transform-job``, ``model-package``, ...): the name as given,
        lowercased, unchecked (the caller checked it, or names what does not exist)."""
        return f"arn:{self.partition}:sagemaker:{self.region}:{self.account_id}:{kind}/{name.lower()}"


_ARN = re.compile(
    r"arn:(?P<partition>aws[a-z\-]*):sagemaker:(?P<region>[a-z0-9\-]+):(?P<account>[0-9]{12}):"
    r"(?P<kind>[a-z\-]+)/(?P<name>[^/]+)"
)


def parse_arn(arn: str, field: str = "arn") -> tuple[ResourceKind, str]:
    """The kind and (lowercase) name of a hosting ARN this control plane could have issued; :class:`InvalidName`
    for anything else. Whether the account and region are ours is the caller's question."""
    match = _ARN.fullmatch(arn) if isinstance(arn, str) and len(arn) <= 2048 else None
    if match is None:
        raise _refuse(field, arn, "Member must be a SageMaker ARN (arn:aws:sagemaker:<region>:<account>:<kind>/<name>)")
    try:
        kind = ResourceKind(match["kind"])
    except ValueError:
        raise _refuse(field, arn, f"the resource type must be one of {', '.join(ResourceKind)}") from None
    return kind, check_name(kind, match["name"], field)
