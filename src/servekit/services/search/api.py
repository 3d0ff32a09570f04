"""SageMaker's ``Search``: the resources of one type whose properties satisfy a search expression.

Each searchable type is read through the plane's own operations (its List* for the names, its Describe* for each
one's properties), so a record holds what Describe answers, cut to the members botocore's ``SearchRecord`` shape
gives that type, with the resource's tags (``Tags.<key>`` may be filtered on). The SDK's model card and registry
code search training jobs by their model artefact and model package groups by name.

The expression: ``Filters`` (a dotted property name, an operator, a value), ``NestedFilters`` (filters any one
element of a list property satisfies), ``SubExpressions``, joined by ``Operator`` (``And`` by default, or ``Or``).
Values compare as numbers when both sides are numbers, as times when the property is a time (the value ISO 8601 or
epoch seconds), else as text; ``Contains`` is a substring of text or a member of a list; ``In`` a comma-separated
list of values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from servekit.aws.errors import validation_exception
from servekit.aws.front import Handler
from servekit.aws.models import service
from servekit.aws.offsets import offset_page

MAX_RESULTS = 100
LISTED_PER_CALL = 100


@dataclass(frozen=True)
class Source:
    """How the plane lists and describes one searchable type."""

    listing: str  # the List* operation
    items: str  # its answer's list
    key: str  # each item's member the Describe* takes
    describe: str
    argument: str  # the Describe* member the key goes to
    arn: str  # the described resource's ARN member (its tags)
    list_args: tuple[tuple[str, Any], ...] = ()


SOURCES = {
    "TrainingJob": Source(
        "ListTrainingJobs", "TrainingJobSummaries", "TrainingJobName", "DescribeTrainingJob", "TrainingJobName",
        "TrainingJobArn",
    ),
    "HyperParameterTuningJob": Source(
        "ListHyperParameterTuningJobs", "HyperParameterTuningJobSummaries", "HyperParameterTuningJobName",
        "DescribeHyperParameterTuningJob", "HyperParameterTuningJobName", "HyperParameterTuningJobArn",
    ),
    "Endpoint": Source("ListEndpoints", "Endpoints", "EndpointName", "DescribeEndpoint", "EndpointName", "EndpointArn"),
    "ModelPackageGroup": Source(
        "ListModelPackageGroups", "ModelPackageGroupSummaryList", "ModelPackageGroupName",
        "DescribeModelPackageGroup", "ModelPackageGroupName", "ModelPackageGroupArn",
    ),
    "ModelPackage": Source(
        "ListModelPackages", "ModelPackageSummaryList", "ModelPackageArn", "DescribeModelPackage", "ModelPackageName",
        "ModelPackageArn", (("ModelPackageType", "Both"),),
    ),
    "Pipeline": Source("ListPipelines", "PipelineSummaries", "PipelineName", "DescribePipeline", "PipelineName",
                       "PipelineArn"),
}  # fmt: skip


class SearchApi:
    def __init__(
        self, operations: Mapping[str, Handler], tags_of: Callable[[str], Sequence[Mapping[str, str]]]
    ) -> None:
        self.operations = operations
        self.tags_of = tags_of
        self.records = service("sagemaker").model.shape_for("SearchRecord").members

    def handlers(self) -> dict[str, Handler]:
        return {"Search": self.search}

    async def search(self, p: dict[str, Any]) -> dict[str, Any]:
        resource = p["Resource"]
        source = SOURCES.get(resource)
        if source is None or source.listing not in self.operations or source.describe not in self.operations:
            raise validation_exception(
                f"servekit searches {', '.join(sorted(SOURCES))}; Resource {resource} is not one of them"
            )
        expression = p.get("SearchExpression") or {}
        found = [doc for doc in await self._all(resource, source) if matches(doc, expression)]
        sort_by = p.get("SortBy") or ("LastModifiedTime" if any("LastModifiedTime" in d for d in found) else "")
        if sort_by:
            present = [d for d in found if lookup(d, sort_by) is not None]
            present.sort(key=lambda d: _sortable(lookup(d, sort_by)), reverse=p.get("SortOrder") != "Ascending")
            found = present + [d for d in found if lookup(d, sort_by) is None]
        page, token = offset_page(found, p.get("NextToken"), int(p.get("MaxResults") or 10))
        out: dict[str, Any] = {"Results": [{resource: doc} for doc in page]}
        if token:
            out["NextToken"] = token
        return out

    async def _all(self, resource: str, source: Source) -> list[dict[str, Any]]:
        keys: list[str] = []
        request: dict[str, Any] = {**dict(source.list_args), "MaxResults": LISTED_PER_CALL}
        while True:
            answer = await self.operations[source.listing](request)
            keys += [str(item[source.key]) for item in answer.get(source.items) or []]
            if not answer.get("NextToken"):
                break
            request = {**request, "NextToken": answer["NextToken"]}
        members = set(self.records[resource].members)
        docs = []
        for key in keys:
            described = await self.operations[source.describe]({source.argument: key})
            doc = {k: v for k, v in described.items() if k in members and k != "ResponseMetadata"}
            if "Tags" in members:
                doc["Tags"] = [dict(t) for t in self.tags_of(str(described.get(source.arn, "")))]
            docs.append(doc)
        return docs


def lookup(doc: Any, name: str) -> Any:
    """The property a dotted name names (``ModelArtifacts.S3ModelArtifacts``; ``Tags.<key>`` is that tag's value);
    None where there is none."""
    value = doc
    for part in name.split("."):
        if isinstance(value, list) and all(isinstance(t, dict) and "Key" in t for t in value):
            value = {t["Key"]: t.get("Value") for t in value}  # a tag list, read by key
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def matches(doc: Mapping[str, Any], expression: Mapping[str, Any]) -> bool:
    results = [_filter(doc, f) for f in expression.get("Filters") or []]
    results += [_nested(doc, n) for n in expression.get("NestedFilters") or []]
    results += [matches(doc, sub) for sub in expression.get("SubExpressions") or []]
    if not results:
        return True
    return any(results) if expression.get("Operator") == "Or" else all(results)


def _nested(doc: Mapping[str, Any], nested: Mapping[str, Any]) -> bool:
    prefix = str(nested["NestedPropertyName"])
    items = lookup(doc, prefix)
    if not isinstance(items, list):
        return False
    filters = [{**f, "Name": str(f["Name"]).removeprefix(prefix + ".")} for f in nested.get("Filters") or []]
    return any(all(_filter(item, f) for f in filters) for item in items)


def _filter(doc: Any, f: Mapping[str, Any]) -> bool:
    operator = str(f.get("Operator", "Equals"))
    value = lookup(doc, str(f["Name"]))
    if operator == "Exists":
        return value is not None
    if operator == "NotExists":
        return value is None
    if value is None:
        return operator == "NotEquals"
    wanted = f.get("Value")
    if wanted is None:
        raise validation_exception(f"The filter on {f['Name']} with operator {operator} needs a Value")
    if operator == "Contains":
        return bool(wanted in value) if isinstance(value, list) else str(wanted) in _text(value)
    if operator == "In":
        return any(_compare(value, w.strip()) == 0 for w in str(wanted).split(","))
    order = _compare(value, str(wanted))
    return {
        "Equals": order == 0,
        "NotEquals": order != 0,
        "GreaterThan": order > 0,
        "GreaterThanOrEqualTo": order >= 0,
        "LessThan": order < 0,
        "LessThanOrEqualTo": order <= 0,
    }[operator]


def _text(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


def _compare(value: Any, wanted: str) -> int:
    """-1, 0 or 1: the property against the filter's value."""
    left: Any
    right: Any
    if isinstance(value, datetime):
        left, right = value, _time(wanted)
    elif isinstance(value, bool):
        left, right = str(value).lower(), wanted.lower()
    else:
        try:
            left, right = float(value), float(wanted)
        except (TypeError, ValueError):
            left, right = _text(value), wanted
    return int(left > right) - int(left < right)


def _time(text: str) -> datetime:
    try:
        return datetime.fromtimestamp(float(text), UTC)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise validation_exception(f"{text!r} is not a time (ISO 8601, or seconds since the epoch)") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _sortable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.timestamp()
    return value if isinstance(value, int | float) else _text(value)
