"""SageMaker's model registry on ``servekit up``: model package groups, model packages versioned within them, and
their approval, with SageMaker's shapes and errors (requests arrive validated against botocore's input shapes).

- **Groups**: CreateModelPackageGroup / DescribeModelPackageGroup / ListModelPackageGroups /
  DeleteModelPackageGroup (refused with ``ConflictException`` while the group holds packages). Tags on a group's
  ARN (AddTags / ListTags / DeleteTags; other ARNs are refused here) carry its deploy-on-approval rule
  (``control.registry_deploy``).
- **Packages**: CreateModelPackage with ``ModelPackageGroupName`` makes the group's next version (1, 2, 3, …;
  ARN ``model-package/<group>/<version>``); with ``ModelPackageName`` an unversioned package. DescribeModelPackage
  takes an ARN, a name (unversioned) or ``<group>/<version>``; ListModelPackages filters by group, approval status,
  name and creation time, sorts by Name or CreationTime and pages with NextToken; UpdateModelPackage changes the
  approval (``control.registry_approval``'s lifecycle) and customer metadata; DeleteModelPackage is the only way a
  package goes: servekit itself never deletes a rejected or superseded version.
- **Approval history**: every approval change records who (the caller's access key id, when the plane tells it),
  when and why (``ApprovalDescription``). DescribeModelPackage answers it in ``ServekitApprovalHistory`` and the
  deployments a rule made in ``ServekitDeployments`` (servekit's fields beside SageMaker's; botocore keeps only
  modeled members, so read them from the raw body or with ``servekit registry history``).
- **Hosting**: :meth:`RegistryService.container_for` is what CreateModel's ``ModelPackageName`` resolves through:
  an approved version (or an unversioned package) gives its first container; any other is refused.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from servekit.aws.errors import ApiError, conflict, validation_exception
from servekit.aws.front import Handler, current_caller
from servekit.aws.names import Account
from servekit.aws.timestamps import optional_epoch
from servekit.services.registry.approval import IllegalApproval, ModelApproval, check_approval
from servekit.services.registry.deploy import Deployer, rule_from_tags
from servekit.services.registry.packages import container_for, find_package
from servekit.services.registry.store import (
    AlreadyExists,
    GroupNotEmpty,
    GroupRow,
    NotFound,
    PackageRow,
    Registry,
    StaleApproval,
)

log = logging.getLogger(__name__)


_GROUP_REF = re.compile(
    r"(?:arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]*:[0-9]{12}:model-package-group/)?(?P<name>[a-zA-Z0-9][a-zA-Z0-9\-]{0,62})"
)
_MODEL_ARN = re.compile(r"arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]+:[0-9]{12}:model/[a-zA-Z0-9][a-zA-Z0-9\-]{0,62}")
_UNKNOWN = "unknown"  # who, when the plane did not say (no signatures, or an internal call)


class RegistryService:
    def __init__(
        self,
        repo: Registry,
        hosting: Mapping[str, Handler],
        account: Account | None = None,
        caller: Callable[[], str | None] = current_caller,
    ) -> None:
        """``hosting``: the hosting API's handlers by operation name (what deploy-on-approval calls);
        ``caller``: the access key id of the request being handled (None when unknown)."""
        self.repo = repo
        self._account = account or Account()
        self._caller = caller
        self._deployer = Deployer(hosting)
        self._hosting = hosting

    def handlers(self) -> dict[str, Handler]:
        return {
            "CreateModelPackageGroup": self.create_model_package_group,
            "DescribeModelPackageGroup": self.describe_model_package_group,
            "ListModelPackageGroups": self.list_model_package_groups,
            "DeleteModelPackageGroup": self.delete_model_package_group,
            "CreateModelPackage": self.create_model_package,
            "DescribeModelPackage": self.describe_model_package,
            "ListModelPackages": self.list_model_packages,
            "UpdateModelPackage": self.update_model_package,
            "DeleteModelPackage": self.delete_model_package,
            "AddTags": self.add_tags,
            "ListTags": self.list_tags,
            "DeleteTags": self.delete_tags,
        }

    # ---- names -----------------------------------------------------------------------------------------------------
    def group_arn(self, name: str) -> str:
        return self._account.arn_of("model-package-group", name)

    def package_arn(self, name: str, version: int | None = None) -> str:
        return self._account.arn_of("model-package", name if version is None else f"{name}/{version}")

    def _who(self) -> str:
        return self._caller() or _UNKNOWN

    def _user(self, who: str) -> dict[str, Any]:
        """SageMaker's ``UserContext`` for a caller: the access key id as the IAM principal."""
        return {"IamIdentity": {"PrincipalId": who}} if who != _UNKNOWN else {}

    # ---- groups ----------------------------------------------------------------------------------------------------
    def _group(self, ref: str) -> GroupRow:
        match = _GROUP_REF.fullmatch(ref)
        row = self.repo.get_group(match["name"]) if match else None
        if row is None:
            raise validation_exception(f"ModelPackageGroup {ref} does not exist.")
        return row

    async def create_model_package_group(self, p: dict[str, Any]) -> dict[str, Any]:
        name = p["ModelPackageGroupName"]
        tags = [{"Key": t["Key"], "Value": t.get("Value", "")} for t in p.get("Tags") or []]
        _check_rule(tags)
        arn = self.group_arn(name)
        try:
            self.repo.create_group(name, arn, p.get("ModelPackageGroupDescription") or "", tags, self._who())
        except AlreadyExists:
            raise validation_exception(f"Model Package Group already exists: {arn}") from None
        return {"ModelPackageGroupArn": arn}

    async def describe_model_package_group(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._group(p["ModelPackageGroupName"])
        out: dict[str, Any] = {
            "ModelPackageGroupName": row.name,
            "ModelPackageGroupArn": row.arn,
            "CreationTime": row.created,
            "CreatedBy": self._user(row.created_by),
            "ModelPackageGroupStatus": "Completed",
        }
        if row.description:
            out["ModelPackageGroupDescription"] = row.description
        rule = rule_from_tags(row.tags)
        if rule is not None:  # servekit's field
            out["ServekitDeployOnApproval"] = rule.to_json()
        return out

    async def list_model_package_groups(self, p: dict[str, Any]) -> dict[str, Any]:
        page = _page(self.repo.list_groups, p, default_order="Descending")
        out: dict[str, Any] = {"ModelPackageGroupSummaryList": [_group_summary(g) for g in page.items]}
        if page.next_token:
            out["NextToken"] = page.next_token
        return out

    async def delete_model_package_group(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._group(p["ModelPackageGroupName"])
        try:
            self.repo.delete_group(row.name)
        except NotFound:
            raise validation_exception(f"ModelPackageGroup {p['ModelPackageGroupName']} does not exist.") from None
        except GroupNotEmpty:
            raise conflict(
                f"Model Package Group {row.arn} cannot be deleted: it contains model packages. Delete them first."
            ) from None
        return {}

    # ---- tags (the groups' deploy rules) ---------------------------------------------------------------------------
    def _tagged_group(self, arn: str) -> GroupRow:
        if ":model-package-group/" not in arn:
            raise validation_exception(
                f"servekit keeps tags of model package groups only (their deploy-on-approval rules), not of {arn}."
            )
        row = self._group(arn)
        if row.arn.lower() != arn.lower():
            raise validation_exception(f"ModelPackageGroup {arn} does not exist.")
        return row

    async def add_tags(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._tagged_group(p["ResourceArn"])
        added = {t["Key"]: t.get("Value", "") for t in p.get("Tags") or []}
        tags = [t for t in row.tags if t["Key"] not in added] + [{"Key": k, "Value": v} for k, v in added.items()]
        if len(tags) > 50:
            raise validation_exception("A resource may have at most 50 tags.")
        _check_rule(tags)
        self.repo.set_group_tags(row.name, tags)
        return {"Tags": [{"Key": k, "Value": v} for k, v in added.items()]}

    async def list_tags(self, p: dict[str, Any]) -> dict[str, Any]:
        return {"Tags": list(self._tagged_group(p["ResourceArn"]).tags)}

    async def delete_tags(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._tagged_group(p["ResourceArn"])
        gone = set(p["TagKeys"])
        tags = [t for t in row.tags if t["Key"] not in gone]
        _check_rule(tags)
        self.repo.set_group_tags(row.name, tags)
        return {}

    # ---- packages --------------------------------------------------------------------------------------------------
    async def create_model_package(self, p: dict[str, Any]) -> dict[str, Any]:
        group_ref, name = p.get("ModelPackageGroupName"), p.get("ModelPackageName")
        if group_ref and name:
            raise validation_exception(
                "Both ModelPackageName and ModelPackageGroupName are provided in the input. Cannot determine which "
                "one to use."
            )
        if not group_ref and not name:
            raise validation_exception(
                "Specify ModelPackageGroupName (a new version in that group) or ModelPackageName (an unversioned "
                "package)."
            )
        if p.get("InferenceSpecification") is None and p.get("SourceUri"):
            found = await self._populated(str(p["SourceUri"]))  # as AWS fills it from a package's or model's ARN
            if found is not None:
                p = {**p, "InferenceSpecification": found}
        if p.get("InferenceSpecification") is not None or not p.get("SourceUri"):
            _check_containers(p.get("InferenceSpecification"))  # a package with only a SourceUri has none yet
        record = {
            k: v
            for k, v in p.items()
            if k not in ("ModelPackageGroupName", "ModelPackageName", "ModelApprovalStatus", "Tags")
        }
        if p.get("Tags"):
            record["Tags"] = p["Tags"]
        who = self._who()
        if name:
            if p.get("ModelApprovalStatus"):
                raise validation_exception(
                    "ModelApprovalStatus applies to versioned model packages only (give ModelPackageGroupName)."
                )
            try:
                row = self.repo.create_unversioned(name, self.package_arn(name), record, who)
            except AlreadyExists:
                raise validation_exception(
                    f"Cannot create already existing model package {self.package_arn(name)}."
                ) from None
            return {"ModelPackageArn": row.arn}
        group = self._group(str(group_ref))
        token = p.get("ClientToken")
        if token:  # idempotent retries: the same token in the same group is the same version
            same = self._by_client_token(group.name, token)
            if same is not None:
                return {"ModelPackageArn": same.arn}
        approval = ModelApproval(p.get("ModelApprovalStatus") or ModelApproval.PENDING)
        row = self.repo.create_version(group.name, self.package_arn, str(approval), record, who)
        log.info("model package %s registered (%s) by %s", row.arn, approval, who)
        if approval is ModelApproval.APPROVED:
            await self._deploy_on_approval(row, who)
        return {"ModelPackageArn": row.arn}

    async def _populated(self, source: str) -> dict[str, Any] | None:
        """The InferenceSpecification AWS fills in from a SourceUri that is a model package's ARN (its own) or a
        model's (its primary container); None for any other source."""
        if _MODEL_ARN.fullmatch(source):
            try:
                model = await self._hosting["DescribeModel"]({"ModelName": source.rsplit("/", 1)[-1]})
            except ApiError:
                return None
            container = model.get("PrimaryContainer") or (model.get("Containers") or [None])[0]
            if not container:
                return None
            kept = ("Image", "ModelDataUrl", "Environment")
            return {"Containers": [{k: container[k] for k in kept if container.get(k)}]}
        if ":model-package/" in source:
            try:
                row = find_package(self.repo, source)
            except ApiError:
                return None
            spec = row.record.get("InferenceSpecification")
            return dict(spec) if spec else None
        return None

    def _by_client_token(self, group: str, token: str) -> PackageRow | None:
        next_token: str | None = None
        while True:
            page = self.repo.list_packages(group=group, max_results=100, next_token=next_token)
            for row in page.items:
                if row.record.get("ClientToken") == token:
                    return row
            if page.next_token is None:
                return None
            next_token = page.next_token

    def _package(self, ref: str, field: str = "ModelPackageName") -> PackageRow:
        return find_package(self.repo, ref, field)

    async def describe_model_package(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._package(p["ModelPackageName"])
        out: dict[str, Any] = {
            **{k: v for k, v in row.record.items() if k not in ("Tags", "ClientToken")},
            "ModelPackageName": row.name,
            "ModelPackageArn": row.arn,
            "CreationTime": row.created,
            "LastModifiedTime": row.modified,
            "ModelPackageStatus": "Completed",
            "ModelPackageStatusDetails": {"ValidationStatuses": [], "ImageScanStatuses": []},
            "CertifyForMarketplace": bool(row.record.get("CertifyForMarketplace", False)),
            "CreatedBy": self._user(row.created_by),
            "LastModifiedBy": self._user(row.modified_by),
        }
        if row.group_name is not None:
            out["ModelPackageGroupName"] = row.group_name
            out["ModelPackageVersion"] = row.version
            out["ModelApprovalStatus"] = row.approval
            if row.approval_description:
                out["ApprovalDescription"] = row.approval_description
        # servekit's fields: who changed the approval when and why, and what deploy-on-approval did
        out["ServekitApprovalHistory"] = self.history(row.arn)
        deployments = [e.detail | {"Time": e.at} for e in self.repo.events(row.arn, "deployment")]
        if deployments:
            out["ServekitDeployments"] = deployments
        return out

    def history(self, arn: str) -> list[dict[str, Any]]:
        """The package's approval changes, oldest first: ``{"Time", "From", "To", "By", "Reason"}``."""
        out = []
        for e in self.repo.events(arn, "approval"):
            entry: dict[str, Any] = {"Time": e.at, "To": e.to_status, "By": e.actor or _UNKNOWN, "Reason": e.reason}
            if e.from_status is not None:
                entry["From"] = e.from_status
            out.append(entry)
        return out

    async def list_model_packages(self, p: dict[str, Any]) -> dict[str, Any]:
        group_ref = p.get("ModelPackageGroupName")
        if group_ref:
            match = _GROUP_REF.fullmatch(group_ref)
            if match is None or self.repo.get_group(match["name"]) is None:
                return {"ModelPackageSummaryList": []}  # a group that does not exist has no packages, as AWS answers
        group = self._group(group_ref).name if group_ref else None
        kind = p.get("ModelPackageType") or ("Versioned" if group else "Unversioned")
        versioned = {"Versioned": True, "Unversioned": False}.get(kind)
        page = _page(
            self.repo.list_packages,
            p,
            default_order="Ascending",
            group=group,
            versioned=versioned,
            approval=p.get("ModelApprovalStatus"),
        )
        out: dict[str, Any] = {"ModelPackageSummaryList": [_package_summary(r) for r in page.items]}
        if page.next_token:
            out["NextToken"] = page.next_token
        return out

    async def update_model_package(self, p: dict[str, Any]) -> dict[str, Any]:
        arn = p["ModelPackageArn"]
        row = self._package(arn, "ModelPackageArn")
        who = self._who()
        record = dict(row.record)
        metadata = dict(record.get("CustomerMetadataProperties") or {})
        metadata.update(p.get("CustomerMetadataProperties") or {})
        for key in p.get("CustomerMetadataPropertiesToRemove") or []:
            metadata.pop(key, None)
        if metadata or "CustomerMetadataProperties" in record:
            record["CustomerMetadataProperties"] = metadata
        if p.get("InferenceSpecification") is not None:
            _check_containers(p["InferenceSpecification"])
            record["InferenceSpecification"] = p["InferenceSpecification"]
        for member in ("SourceUri", "ModelLifeCycle", "ModelPackageRegistrationType"):
            if p.get(member) is not None:
                record[member] = p[member]
        if p.get("ModelCard") is not None:  # a status alone keeps the content, content alone keeps the status
            record["ModelCard"] = {**(record.get("ModelCard") or {}), **p["ModelCard"]}
        if p.get("AdditionalInferenceSpecificationsToAdd"):
            added = [
                *(record.get("AdditionalInferenceSpecifications") or []),
                *p["AdditionalInferenceSpecificationsToAdd"],
            ]
            names = [spec["Name"] for spec in added]
            if len(names) != len(set(names)):
                raise validation_exception("AdditionalInferenceSpecifications must have unique names.")
            record["AdditionalInferenceSpecifications"] = added
        wanted = p.get("ModelApprovalStatus")
        if wanted is None:
            if p.get("ApprovalDescription") is not None:
                raise validation_exception("ApprovalDescription goes with ModelApprovalStatus.")
            self.repo.set_record(row.arn, record, who)
            return {"ModelPackageArn": row.arn}
        if row.group_name is None or row.approval is None:
            raise validation_exception("ModelApprovalStatus applies to versioned model packages only.")
        current, to = ModelApproval(row.approval), ModelApproval(wanted)
        try:
            check_approval(current, to)
            updated = self.repo.set_approval(
                row.arn,
                expected=str(current),
                to=str(to),
                actor=who,
                reason=p.get("ApprovalDescription") or "",
                record=record,
            )
        except IllegalApproval as exc:
            raise validation_exception(str(exc)) from None
        except StaleApproval as exc:
            raise conflict(f"Model package {row.arn} changed meanwhile (it is {exc.actual} now); try again.") from None
        log.info("model package %s: %s -> %s by %s", row.arn, current, to, who)
        if to is ModelApproval.APPROVED and current is not ModelApproval.APPROVED:
            await self._deploy_on_approval(updated, who)
        return {"ModelPackageArn": row.arn}

    async def delete_model_package(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._package(p["ModelPackageName"])
        self.repo.delete_package(row.arn)
        log.info("model package %s deleted by %s", row.arn, self._who())
        return {}

    # ---- deploy on approval ----------------------------------------------------------------------------------------
    async def _deploy_on_approval(self, row: PackageRow, who: str) -> None:
        """Run the group's rule, if it has one. The approval stands whatever happens: the deployment's outcome (or
        why it could not start) is recorded as the package's deployment event and logged."""
        group = self.repo.get_group(row.group_name or "")
        if group is None or row.version is None:
            return
        try:
            rule = rule_from_tags(group.tags)
        except ValueError as exc:  # tags are checked when set; a hand-edited database is the only way here
            log.warning("model package group %s: unreadable deploy rule: %s", group.name, exc)
            return
        if rule is None:
            return
        try:
            detail = await self._deployer.deploy(rule, row.arn, group.name, row.version)
            detail["Outcome"] = "UpdateEndpointStarted"
            log.info("model package %s deployed to endpoint %s: %s", row.arn, rule.endpoint, detail)
        except ApiError as exc:
            detail = {"EndpointName": rule.endpoint, "Outcome": "Failed", "Message": f"{exc.code}: {exc.message}"}
            log.warning("model package %s: deploy on approval to %s failed: %s", row.arn, rule.endpoint, exc.message)
        self.repo.add_event(row.arn, "deployment", who, detail)

    # ---- for hosting: CreateModel's ModelPackageName ---------------------------------------------------------------
    def container_for(self, ref: str) -> dict[str, Any]:
        """:func:`servekit.services.registry.packages.container_for` over this registry's state."""
        return container_for(self.repo, ref)


def _check_containers(spec: Mapping[str, Any] | None) -> None:
    containers = (spec or {}).get("Containers") or []
    if not containers:
        raise validation_exception("InferenceSpecification with at least one container is required.")
    if len(containers) > 1:
        raise validation_exception(
            f"servekit serves one container per model package; this InferenceSpecification has {len(containers)}."
        )


def _check_rule(tags: Sequence[Mapping[str, Any]]) -> None:
    try:
        rule_from_tags(tags)
    except ValueError as exc:
        raise validation_exception(f"Invalid deploy-on-approval rule: {exc}") from None


def _group_summary(g: GroupRow) -> dict[str, Any]:
    out: dict[str, Any] = {
        "ModelPackageGroupName": g.name,
        "ModelPackageGroupArn": g.arn,
        "CreationTime": g.created,
        "ModelPackageGroupStatus": "Completed",
    }
    if g.description:
        out["ModelPackageGroupDescription"] = g.description
    return out


def _package_summary(r: PackageRow) -> dict[str, Any]:
    out: dict[str, Any] = {
        "ModelPackageName": r.name,
        "ModelPackageArn": r.arn,
        "CreationTime": r.created,
        "ModelPackageStatus": "Completed",
    }
    if r.record.get("ModelPackageDescription"):
        out["ModelPackageDescription"] = r.record["ModelPackageDescription"]
    if r.group_name is not None:
        out.update(ModelPackageGroupName=r.group_name, ModelPackageVersion=r.version, ModelApprovalStatus=r.approval)
    return out


def _page(fetch: Callable[..., Any], p: Mapping[str, Any], default_order: str, **filters: Any) -> Any:
    """A listing's page from SageMaker's list parameters; a bad NextToken is a ValidationException."""
    kwargs: dict[str, Any] = {
        "name_contains": p.get("NameContains"),
        "created_after": optional_epoch(p.get("CreationTimeAfter")),
        "created_before": optional_epoch(p.get("CreationTimeBefore")),
        "sort_by": p.get("SortBy") or "CreationTime",
        "sort_order": p.get("SortOrder") or default_order,
        "next_token": p.get("NextToken"),
        **filters,
    }
    if p.get("MaxResults") is not None:
        kwargs["max_results"] = int(p["MaxResults"])
    try:
        return fetch(**kwargs)
    except ValueError as exc:  # InvalidNextToken, a bad sort
        raise validation_exception(str(exc)) from None
