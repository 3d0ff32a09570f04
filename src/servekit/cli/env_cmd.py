"""``servekit env``: the shell lines that point every AWS client on this machine at a ``servekit up``.

``eval "$(servekit env)"`` is the whole set-up for boto3, the AWS CLI and the SageMaker Python SDK:
``AWS_ENDPOINT_URL`` (every service boto3 ≥ 1.28.57 and the CLI call goes to the plane), the home's key and
region, and ``SAGEMAKER_USER_CONFIG_OVERRIDE``: a SageMaker SDK config file in the home naming the plane's default
bucket. The SDK builds its STS client with an explicit ``sts.<region>.amazonaws.com`` endpoint that no variable
overrides, and calls it only to name a default bucket: with the bucket configured it never does. The same file
opts out of the SDK's telemetry (pings to an AWS bucket, which fail here).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Annotated

import typer

from servekit.cli.api_client import DEFAULT_URL, URL_ENV, credentials, fail, home_dir, leader_url

REGION = "us-east-1"
ACCOUNT = "000000000000"
SDK_CONFIG = "sagemaker-sdk-config.yaml"
S3_ENDPOINT_FILE = "s3-endpoint"  # the name servekit.launch.up writes (the CLI does not import the launch layer)


def default_bucket(region: str = REGION, account: str = ACCOUNT) -> str:
    """The bucket the SageMaker SDK uses by default, as AWS names it (servekit up creates it)."""
    return f"sagemaker-{region}-{account}"


def sdk_config(bucket: str) -> str:
    """The SageMaker SDK's config file (its schema: sagemaker/config/config_schema.py)."""
    return (
        "# Written by `servekit env`: the SageMaker Python SDK's settings for a servekit up (docs/sagemaker-sdk.md).\n"
        "SchemaVersion: '1.0'\n"
        "SageMaker:\n"
        "  PythonSDK:\n"
        "    Modules:\n"
        "      TelemetryOptOut: true\n"
        "      Session:\n"
        f"        DefaultS3Bucket: {bucket}\n"
    )


def lines(
    url: str, access_key_id: str, secret: str, config: Path, home: Path, s3: str | None = None, region: str = REGION
) -> list[str]:
    """``s3``: the external S3 servekit up was started with (``--s3-endpoint``), if any."""
    q = shlex.quote
    return [
        f"export AWS_ENDPOINT_URL={q(url)}",
        f"export AWS_ENDPOINT_URL_S3={q(s3)}" if s3 else "unset AWS_ENDPOINT_URL_S3",
        f"export AWS_ACCESS_KEY_ID={q(access_key_id)}",
        f"export AWS_SECRET_ACCESS_KEY={q(secret)}",
        f"export AWS_DEFAULT_REGION={q(region)}",
        f"export AWS_REGION={q(region)}",
        f"export SAGEMAKER_USER_CONFIG_OVERRIDE={q(str(config))}",
        f"export SERVEKIT_HOME={q(str(home))}",
        f"export {URL_ENV}={q(url)}",
        "unset AWS_PROFILE AWS_SESSION_TOKEN AWS_SECURITY_TOKEN",
    ]


def env(
    home: Annotated[
        Path | None,
        typer.Option("--home", help="servekit home with the keys (default $SERVEKIT_HOME or ./.servekit)."),
    ] = None,
    url: Annotated[
        str | None,
        typer.Option("--url", help="servekit up's address (default: where the home's servekit up said it listens)."),
    ] = None,
    scope: Annotated[
        str, typer.Option("--scope", help="admin (every API, the default) or invoke (InvokeEndpoint only).")
    ] = "admin",
) -> None:
    """Print shell lines that point boto3, the AWS CLI and the SageMaker SDK at a servekit up:
    eval "$(servekit env)"."""
    if scope not in ("admin", "invoke"):
        raise fail(f"--scope must be admin or invoke, not {scope!r}", 2)
    root = home_dir(home)
    creds = credentials(root)
    try:
        key = creds.first("admin" if scope == "admin" else "invoke")
    except LookupError:
        if scope == "admin":
            raise fail(f"{root} has no admin key") from None
        key = creds.add_key("invoke", "servekit-env")  # an application key, made once and kept in the home
    address = (url or os.environ.get(URL_ENV) or leader_url(root) or DEFAULT_URL).rstrip("/")
    config = root / SDK_CONFIG
    text = sdk_config(default_bucket())
    if not config.exists() or config.read_text() != text:
        config.write_text(text)
    record = root / S3_ENDPOINT_FILE  # written by servekit up --s3-endpoint
    s3 = record.read_text().strip() if record.exists() else None
    typer.echo("\n".join(lines(address, key.access_key_id, key.secret_access_key, config, root, s3)))
