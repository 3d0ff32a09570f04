"""An in-process client for the whole REST app: requests go through every adapter without a socket.

Needs ``httpx`` (Starlette's TestClient); the test extra has it. Kept apart from ``servekit.testing`` so that
importing the fakes does not import Starlette.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from starlette.testclient import TestClient

from servekit.config.models import ServerConfig
from servekit.serving.core.assembly import ServingCore
from servekit.serving.protocols.app import FastPath, build_app
from servekit.serving.protocols.lifespan import CoreLifespan

LOOPBACK = ("127.0.0.1", 50000)


def wait_until_loaded(client: TestClient) -> None:
    """Return once the app's model manager has no load in flight (every configured version has loaded or
    failed): it waits on the manager's own tasks on the app's event loop, not on a clock."""
    assert client.portal is not None, "use the client inside its `with` block"
    core: ServingCore = client.app.state.core  # type: ignore[attr-defined]
    client.portal.call(core.manager.wait_idle)


def serving_app(config: ServerConfig, core: ServingCore | None = None) -> FastPath:
    """What ``servekit serve`` runs for ``config`` (REST only), in process: a core (``core``, or one built here)
    under the REST app, started and stopped by the app's lifespan."""
    core = core or ServingCore(config)
    return build_app(config, core, around=lambda app: CoreLifespan(app, core))


@contextmanager
def app_client(
    config: ServerConfig, core: ServingCore | None = None, client_address: tuple[str, int] = LOOPBACK
) -> Iterator[TestClient]:
    """The app for ``config`` started in process, every model loaded; errors answer as HTTP, not raise.
    Requests come from ``client_address`` (loopback by default, as a local ``curl`` would)."""
    with TestClient(serving_app(config, core), raise_server_exceptions=False, client=client_address) as client:
        wait_until_loaded(client)
        yield client
