"""``servekit registry ...``: the model registry of a running ``servekit up``, through its SageMaker API (the same
calls boto3 makes, signed with the home's admin key).

- ``groups``, ``create-group NAME``, ``packages --group NAME``, ``describe PACKAGE``;
- ``approve|reject PACKAGE --reason TEXT`` (UpdateModelPackage with ApprovalDescription) and ``history PACKAGE``
  (who changed the approval when and why, and what deploy-on-approval did);
- ``set-rule|show-rule|clear-rule GROUP``: the group's deploy-on-approval rule, kept in its tags
  (``servekit.services.registry.deploy``).

Commands read ``servekit NOUN VERB`` like the rest of the CLI, so the registry's are one level deep.

``PACKAGE`` is a model package ARN or ``GROUP/VERSION`` (e.g. ``churn/3``). Errors print one line and exit 1.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from servekit.cli.api_client import _keep_servekit_fields
from servekit.cli.hosting_cmd import (
    DEFAULT_URL,
    HomeOpt,
    JsonOpt,
    UrlOpt,
    _all_pages,
    _api_errors,
    _client,
    _console,
    _fail,
    _fields_table,
    _print_json,
    _rows_table,
    _when,
)

registry_app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="The model registry of a running servekit up: groups, packages, approval, deploy on approval.",
)

PackageArg = Annotated[str, typer.Argument(help="A model package ARN or GROUP/VERSION, e.g. churn/3.")]
GroupArg = Annotated[str, typer.Argument(help="The model package group's name.")]


def _sm(url: str, home: Any) -> Any:
    sm = _client("sagemaker", url, home)
    for operation in ("DescribeModelPackage", "DescribeModelPackageGroup"):  # keep servekit's fields (history…)
        sm.meta.events.register(f"after-call.sagemaker.{operation}", _keep_servekit_fields)
    return sm


# ---- groups --------------------------------------------------------------------------------------------------------
@registry_app.command("groups")
def groups_list(url: UrlOpt = DEFAULT_URL, home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """List the model package groups (newest first)."""
    sm = _sm(url, home)
    with _api_errors(url):
        groups = _all_pages(sm, "list_model_package_groups", "ModelPackageGroupSummaryList")
    if as_json:
        _print_json({"ModelPackageGroupSummaryList": groups})
        return
    if not groups:
        typer.echo("no model package groups (servekit registry create-group NAME makes one)")
        return
    columns = [
        ("Name", "ModelPackageGroupName"),
        ("Created", "CreationTime"),
        ("Description", "ModelPackageGroupDescription"),
    ]
    _console().print(_rows_table(groups, columns))


@registry_app.command("create-group")
def groups_create(
    name: GroupArg,
    description: Annotated[str, typer.Option("--description", help="What the group's models are for.")] = "",
    url: UrlOpt = DEFAULT_URL,
    home: HomeOpt = None,
) -> None:
    """Create a model package group (its versions are numbered from 1)."""
    sm = _sm(url, home)
    with _api_errors(url):
        arn = sm.create_model_package_group(ModelPackageGroupName=name, ModelPackageGroupDescription=description)
    typer.echo(arn["ModelPackageGroupArn"])


# ---- packages ------------------------------------------------------------------------------------------------------
@registry_app.command("packages")
def packages_list(
    group: Annotated[str, typer.Option("--group", help="The group whose versions to list.")],
    status: Annotated[
        str | None,
        typer.Option("--status", help="Only this approval status: PendingManualApproval, Approved, Rejected."),
    ] = None,
    url: UrlOpt = DEFAULT_URL,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List a group's versions, oldest first, with their approval status."""
    sm = _sm(url, home)
    with _api_errors(url):
        packages = _all_pages(
            sm,
            "list_model_packages",
            "ModelPackageSummaryList",
            ModelPackageGroupName=group,
            ModelApprovalStatus=status,
        )
    if as_json:
        _print_json({"ModelPackageSummaryList": packages})
        return
    if not packages:
        typer.echo(f"no model packages in {group}" + (f" with status {status}" if status else ""))
        return
    columns = [
        ("Version", "ModelPackageVersion"),
        ("Approval", "ModelApprovalStatus"),
        ("Created", "CreationTime"),
        ("ARN", "ModelPackageArn"),
    ]
    _console().print(_rows_table(packages, columns))


def _describe(sm: Any, ref: str, url: str) -> dict[str, Any]:
    with _api_errors(url):
        described: dict[str, Any] = sm.describe_model_package(ModelPackageName=ref)
    return described


@registry_app.command("describe")
def packages_describe(
    package: PackageArg, url: UrlOpt = DEFAULT_URL, home: HomeOpt = None, as_json: JsonOpt = False
) -> None:
    """A model package: its containers, metrics, metadata, approval (history: servekit registry history)."""
    described = _describe(_sm(url, home), package, url)
    if as_json:
        _print_json(described)
        return
    _console().print(_fields_table(described, skip=("ServekitApprovalHistory", "ServekitDeployments")))


# ---- approval ------------------------------------------------------------------------------------------------------
def _set_approval(package: str, status: str, reason: str, url: str, home: Any) -> None:
    sm = _sm(url, home)
    arn = _describe(sm, package, url)["ModelPackageArn"]
    with _api_errors(url):
        sm.update_model_package(ModelPackageArn=arn, ModelApprovalStatus=status, ApprovalDescription=reason)
    described = _describe(sm, arn, url)
    typer.echo(f"{arn}: {described.get('ModelApprovalStatus')}")
    deployments = described.get("ServekitDeployments") or []
    if status == "Approved" and deployments:
        last = deployments[-1]
        where = last.get("EndpointName", "?")
        if last.get("Outcome") == "Failed":
            typer.echo(f"deploy on approval to {where} could not start: {last.get('Message', '')}")
        else:
            typer.echo(
                f"deploy on approval: endpoint {where} is updating to {last.get('EndpointConfigName')} "
                f"(model {last.get('ModelName')}; servekit endpoint describe {where})"
            )


Reason = Annotated[str, typer.Option("--reason", help="Why (the ApprovalDescription, kept in the history).")]


@registry_app.command("approve")
def approve(package: PackageArg, reason: Reason, url: UrlOpt = DEFAULT_URL, home: HomeOpt = None) -> None:
    """Approve a version (deploys it when its group has a deploy rule)."""
    _set_approval(package, "Approved", reason, url, home)


@registry_app.command("reject")
def reject(package: PackageArg, reason: Reason, url: UrlOpt = DEFAULT_URL, home: HomeOpt = None) -> None:
    """Reject a version (it is kept: servekit never deletes a version by itself)."""
    _set_approval(package, "Rejected", reason, url, home)


@registry_app.command("history")
def history(package: PackageArg, url: UrlOpt = DEFAULT_URL, home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """Who changed a version's approval, when and why; and what deploy on approval did."""
    described = _describe(_sm(url, home), package, url)
    changes = described.get("ServekitApprovalHistory") or []
    deployments = described.get("ServekitDeployments") or []
    if as_json:
        _print_json({"ApprovalHistory": changes, "Deployments": deployments})
        return
    typer.echo(f"{described['ModelPackageArn']}: {described.get('ModelApprovalStatus', '(unversioned)')}")
    rows = [{**c, "Time": _when_epoch(c.get("Time"))} for c in changes]
    cols = [("Time", "Time"), ("From", "From"), ("To", "To"), ("By", "By"), ("Reason", "Reason")]
    _console().print(_rows_table(rows, cols))
    if deployments:
        rows = [{**d, "Time": _when_epoch(d.get("Time"))} for d in deployments]
        cols = [
            ("Time", "Time"),
            ("Endpoint", "EndpointName"),
            ("Endpoint config", "EndpointConfigName"),
            ("Outcome", "Outcome"),
            ("Message", "Message"),
        ]
        _console().print(_rows_table(rows, cols))


def _when_epoch(value: Any) -> str:
    from datetime import UTC, datetime

    return _when(datetime.fromtimestamp(float(value), UTC)) if isinstance(value, int | float) else _when(value)


# ---- deploy rules --------------------------------------------------------------------------------------------------
def _group(sm: Any, name: str, url: str) -> dict[str, Any]:
    with _api_errors(url):
        described: dict[str, Any] = sm.describe_model_package_group(ModelPackageGroupName=name)
    return described


@registry_app.command("set-rule")
def rule_set(
    group: GroupArg,
    endpoint: Annotated[str, typer.Option("--endpoint", help="The endpoint an approved version is deployed to.")],
    variant: Annotated[
        str | None, typer.Option("--variant", help="Its variant whose model is replaced (if it has several).")
    ] = None,
    deployment: Annotated[
        str,
        typer.Option(
            "--deployment",
            help="How: all (default), canary=P, linear=P, steps=5/20/50/100 or rolling=P, with wait=S, bake=S, "
            "timeout=S, alarm=NAME; e.g. 'canary=10 wait=300 alarm=churn-p99'.",
        ),
    ] = "",
    url: UrlOpt = DEFAULT_URL,
    home: HomeOpt = None,
) -> None:
    """When a version of GROUP becomes Approved, update ENDPOINT to it (a guarded rollout with --deployment)."""
    from servekit.services.registry.deploy import RULE_TAGS, rule_tags

    try:
        tags = rule_tags(endpoint, variant, deployment)
    except ValueError as exc:
        raise _fail(str(exc), code=2) from None
    sm = _sm(url, home)
    arn = _group(sm, group, url)["ModelPackageGroupArn"]
    with _api_errors(url):
        sm.add_tags(ResourceArn=arn, Tags=tags)
        stale = [k for k in RULE_TAGS if k not in {t["Key"] for t in tags}]
        present = {t["Key"] for t in sm.list_tags(ResourceArn=arn)["Tags"]}
        if present & set(stale):
            sm.delete_tags(ResourceArn=arn, TagKeys=sorted(present & set(stale)))
    _show(sm, group, url, as_json=False)


def _show(sm: Any, group: str, url: str, as_json: bool) -> None:
    rule = _group(sm, group, url).get("ServekitDeployOnApproval")
    if as_json:
        _print_json({"DeployOnApproval": rule})
    elif rule is None:
        typer.echo(f"{group}: no deploy-on-approval rule (servekit registry set-rule {group} --endpoint NAME)")
    else:
        typer.echo(f"{group}: when a version becomes Approved, update endpoint {rule['EndpointName']}")
        _console().print(_fields_table(rule))


@registry_app.command("show-rule")
def rule_show(group: GroupArg, url: UrlOpt = DEFAULT_URL, home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """The group's rule and the DeploymentConfig it sends with UpdateEndpoint."""
    _show(_sm(url, home), group, url, as_json)


@registry_app.command("clear-rule")
def rule_clear(group: GroupArg, url: UrlOpt = DEFAULT_URL, home: HomeOpt = None) -> None:
    """Remove the group's rule: approvals deploy nothing."""
    from servekit.services.registry.deploy import RULE_TAGS

    sm = _sm(url, home)
    arn = _group(sm, group, url)["ModelPackageGroupArn"]
    with _api_errors(url):
        present = {t["Key"] for t in sm.list_tags(ResourceArn=arn)["Tags"]} & set(RULE_TAGS)
        if present:
            sm.delete_tags(ResourceArn=arn, TagKeys=sorted(present))
    typer.echo(f"{group}: no deploy-on-approval rule")
