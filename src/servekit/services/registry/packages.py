"""Model packages found by reference, and the container a package gives CreateModel: read-only lookups over the
registry's state, so the hosting service can be handed them at construction without the registry's API (which
itself calls the hosting operations for deploy on approval)."""

from __future__ import annotations

import re
from typing import Any

from servekit.aws.errors import validation_exception
from servekit.services.registry.approval import ModelApproval
from servekit.services.registry.store import PackageRow, Registry

# A package name, ARN or ``<name>/<version>`` as DescribeModelPackage and CreateModel's ModelPackageName take it.
PACKAGE_REF = re.compile(
    r"(?:arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]*:[0-9]{12}:model-package/)?(?P<name>[a-zA-Z0-9][a-zA-Z0-9\-]{0,62})"
    r"(?:/(?P<version>[0-9]{1,9}))?"
)


def find_package(repo: Registry, ref: str, field: str = "ModelPackageName") -> PackageRow:
    """The package ``ref`` names (name, ARN or ``name/version``); ValidationException naming ``field`` if none."""
    match = PACKAGE_REF.fullmatch(ref)
    row: PackageRow | None = None
    if match is not None:
        if match["version"] is not None:
            row = repo.get_version(match["name"], int(match["version"]))
        else:
            row = repo.get_unversioned(match["name"])
    if row is None:
        raise validation_exception(f"Model Package {ref} ({field}) does not exist.")
    return row


def container_for(repo: Registry, ref: str) -> dict[str, Any]:
    """The container CreateModel gets from ``PrimaryContainer.ModelPackageName``: the package's first inference
    container (Image, ModelDataUrl, Environment) and its ARN as ``ModelPackageName``. ``ApiError`` for a
    package that does not exist or a version that is not Approved."""
    row = find_package(repo, ref)
    if row.group_name is not None and row.approval != ModelApproval.APPROVED:
        raise validation_exception(
            f"Model package {row.arn} is {row.approval}: only an Approved model package version can be "
            "deployed. Approve it first (UpdateModelPackage with ModelApprovalStatus=Approved)."
        )
    spec = row.record.get("InferenceSpecification") or {}
    first = dict((spec.get("Containers") or [{}])[0])
    container = {k: first[k] for k in ("Image", "ModelDataUrl", "Environment") if first.get(k) is not None}
    container["ModelPackageName"] = row.arn
    return container
