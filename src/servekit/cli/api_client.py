"""botocore clients of a running ``servekit up`` for the CLI, signed with a servekit home's admin key, and the
CLI's way of reporting what goes wrong with them (one line ``servekit: <Code>: <Message>``, exit status 1, never a
traceback). Shared by the hosting, autoscaling and monitor commands."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from servekit.aws import Credentials

DEFAULT_URL = "http://127.0.0.1:8765"
URL_ENV = "SERVEKIT_URL"
REGION = "us-east-1"


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print ``servekit: <message>`` to stderr; the exit to raise."""
    typer.echo(f"servekit: {message}", err=True)
    return typer.Exit(code)


def home_dir(home: Path | None) -> Path:
    """``--home``, else ``$SERVEKIT_HOME``, else ``./.servekit``."""
    from servekit.state.home import resolve_home

    return resolve_home(home, os.environ)


def credentials(home: Path) -> Credentials:
    """The home's keys; a home without a key file is an error here (the CLI never makes a stray home)."""
    from servekit.aws import Credentials

    if not (home / "credentials.json").exists():
        raise fail(
            f"no access keys in {home} (no credentials.json): start servekit up with this home first, "
            "or point --home / $SERVEKIT_HOME at the home servekit up uses"
        )
    try:
        return Credentials.load(home)
    except (OSError, ValueError) as exc:
        raise fail(str(exc)) from None


def client(service: str, url: str, home: Path | None) -> Any:
    """A botocore client of ``service`` (``sagemaker``, ``cloudwatch``…) at ``url``, signed with the home's first
    admin key; short connect timeout and one retry, so a CLI call against a stopped ``servekit up`` fails fast.
    Where neither ``--url`` nor ``$SERVEKIT_URL`` names an address, the one the home's ``servekit up`` recorded is
    used (so ``servekit up --port 9000`` needs no flag on the other commands)."""
    from botocore.config import Config

    from servekit.aws import client as signed_client

    root = home_dir(home)
    credentials(root)
    if url == DEFAULT_URL and not os.environ.get(URL_ENV):
        url = leader_url(root) or url
    config = Config(connect_timeout=5, read_timeout=120, retries={"mode": "standard", "total_max_attempts": 2})
    with api_errors(url):
        made = signed_client(root, service, url.rstrip("/"), region=REGION, config=config)
    made.meta.events.register("after-call.sagemaker.DescribeEndpoint", _keep_servekit_fields)
    return made


def _keep_servekit_fields(http_response: Any, parsed: dict[str, Any], **_: Any) -> None:
    """botocore's parser keeps only modeled members; servekit's own DescribeEndpoint fields (``Servekit*``:
    cost per hour, oversubscription warnings) are copied back from the raw body so the CLI can show them."""
    try:
        raw = json.loads(http_response.content or b"{}")
    except ValueError:
        return
    if isinstance(raw, dict):
        parsed.update({k: v for k, v in raw.items() if k.startswith("Servekit")})


@contextlib.contextmanager
def api_errors(url: str) -> Iterator[None]:
    """API errors as one line and exit 1, never a traceback."""
    import botocore.exceptions as bx

    try:
        yield
    except bx.ClientError as exc:
        error = exc.response.get("Error", {})
        raise fail(f"{error.get('Code', 'Error')}: {error.get('Message', '') or exc}") from None
    except (bx.EndpointConnectionError, bx.ConnectTimeoutError) as exc:
        where = getattr(exc, "kwargs", {}).get("endpoint_url") or url  # the client may use the home's recorded one
        raise fail(f"cannot reach servekit up at {where} ({type(exc).__name__}): is it running?") from None
    except bx.BotoCoreError as exc:
        raise fail(f"{type(exc).__name__}: {exc}") from None


def leader_url(home: Path) -> str | None:
    """The address the home's running ``servekit up`` recorded, if one did."""
    from servekit.gateway.store import GatewayRoutes
    from servekit.services.database import StateDB
    from servekit.state.database import database_path

    if not database_path(home).exists():
        return None
    try:
        with StateDB.open(home) as db:
            row = GatewayRoutes(db.conn).leader()
    except Exception:  # an unreadable or older home: the caller falls back to the default address
        return None
    return row.url if row is not None else None
