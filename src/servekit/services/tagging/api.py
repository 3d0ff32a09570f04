"""SageMaker's AddTags, ListTags and DeleteTags for every resource, and the ``Tags`` each Create* request carries.

Tags are kept by ARN (:mod:`.store`). Every Create* operation is wrapped (:meth:`TaggingApi.recording`): once it
succeeds, the ARN its answer names starts with the request's ``Tags`` (none: an empty list), so that ListTags of a
training job, a model or an endpoint answers what it was created with (the SDK's ``Estimator.attach`` reads them).
A model package group's tags stay the registry's (they carry its deploy-on-approval rules): its ARN goes to the
registry's handlers.

An ARN no Create* recorded (a resource from before tags were kept, or one a service made itself, such as a tuning
job's training jobs) is looked up with its Describe operation (``training-job/<name>`` → ``DescribeTrainingJob``):
a resource that does not exist is a ValidationException, as SageMaker answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servekit.aws.errors import ApiError, validation_exception
from servekit.aws.front import Handler
from servekit.aws.offsets import offset_page
from servekit.services.tagging.store import Tag, Tags

MAX_TAGS = 50  # SageMaker's limit per resource
GROUP = ":model-package-group/"
REGISTRY_OPS = ("AddTags", "ListTags", "DeleteTags")


def _camel(kind: str) -> str:
    return "".join(part.capitalize() for part in kind.split("-"))


def _created_arn(answer: Mapping[str, Any]) -> str | None:
    arns = [v for k, v in answer.items() if k.endswith("Arn") and isinstance(v, str)]
    return arns[0] if len(arns) == 1 else None


class TaggingApi:
    def __init__(self, store: Tags, operations: Mapping[str, Handler]) -> None:
        """``operations``: SageMaker's other handlers (their Describe* tell whether an ARN exists; the registry's
        tag operations keep model package groups' tags)."""
        self.store = store
        self.operations = operations
        self.registry = {op: operations[op] for op in REGISTRY_OPS if op in operations}

    def handlers(self) -> dict[str, Handler]:
        return {"AddTags": self.add_tags, "ListTags": self.list_tags, "DeleteTags": self.delete_tags}

    def recording(self, operations: Mapping[str, Handler]) -> dict[str, Handler]:
        """``operations``' Create* handlers, each recording its new resource's tags after it succeeds."""
        return {
            op: self._recorded(handler)
            for op, handler in operations.items()
            if op.startswith("Create") and op != "CreateModelPackageGroup"
        }

    def _recorded(self, handler: Handler) -> Handler:
        async def create(p: dict[str, Any]) -> dict[str, Any]:
            answer = await handler(p)
            arn = _created_arn(answer)
            if arn is not None:
                self.store.replace(arn, [{"Key": t["Key"], "Value": t.get("Value", "")} for t in p.get("Tags") or []])
            return answer

        return create

    async def _known(self, arn: str) -> list[Tag]:
        """The ARN's tags; a ValidationException when no such resource exists."""
        tags = self.store.get(arn)
        if tags is not None:
            return tags
        kind, _, name = arn.split(":", 5)[-1].partition("/")
        if not kind or not name:
            raise validation_exception(f"{arn} is not a SageMaker resource ARN (arn:aws:sagemaker:…:<type>/<name>).")
        describe = self.operations.get(f"Describe{_camel(kind)}")
        if describe is not None:
            try:
                await describe({f"{_camel(kind)}Name": arn if kind == "model-package" else name})
            except ApiError:
                raise validation_exception(f"Resource {arn} does not exist.") from None
        return []

    async def add_tags(self, p: dict[str, Any]) -> dict[str, Any]:
        arn = p["ResourceArn"]
        if GROUP in arn and "AddTags" in self.registry:
            return await self.registry["AddTags"](p)
        await self._known(arn)
        added = {t["Key"]: t.get("Value", "") for t in p.get("Tags") or []}

        def change(tags: list[Tag]) -> list[Tag]:
            kept = [t for t in tags if t["Key"] not in added] + [{"Key": k, "Value": v} for k, v in added.items()]
            if len(kept) > MAX_TAGS:
                raise validation_exception(f"A resource may have at most {MAX_TAGS} tags; {arn} would have {len(kept)}")
            return kept

        self.store.update(arn, change)
        return {"Tags": [{"Key": k, "Value": v} for k, v in added.items()]}

    async def list_tags(self, p: dict[str, Any]) -> dict[str, Any]:
        arn = p["ResourceArn"]
        if GROUP in arn and "ListTags" in self.registry:
            return await self.registry["ListTags"](p)
        page, token = offset_page(await self._known(arn), p.get("NextToken"), int(p.get("MaxResults") or MAX_TAGS))
        return {"Tags": list(page), **({"NextToken": token} if token else {})}

    async def delete_tags(self, p: dict[str, Any]) -> dict[str, Any]:
        arn = p["ResourceArn"]
        if GROUP in arn and "DeleteTags" in self.registry:
            return await self.registry["DeleteTags"](p)
        await self._known(arn)
        gone = set(p["TagKeys"])
        self.store.update(arn, lambda tags: [t for t in tags if t["Key"] not in gone])
        return {}
