"""An instance of a model created with ``EnableNetworkIsolation`` (as SageMaker runs its container with no network):
it runs in a network namespace of its own, which holds only its loopback, where it listens; the gateway reaches it at
a port of this machine's loopback, from which this process carries each connection into the namespace. Where
namespaces cannot be made (:func:`servekit._utils.netns.available`), the instance shares this machine's network and
the plane says so."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from servekit._utils import netns

log = logging.getLogger(__name__)


@dataclass
class IsolatedNetwork:
    """One instance's namespace: the prefix that starts its command there, the port it is reached at here."""

    ns: netns.Namespace
    port: int  # on this machine's 127.0.0.1
    server: asyncio.Server

    def enter(self) -> list[str]:
        return self.ns.enter()

    async def close(self) -> None:
        await netns.close_server(self.server)
        await asyncio.to_thread(self.ns.close)


async def isolate(instance_id: str, inner_port: int) -> IsolatedNetwork | None:
    """A namespace for the instance, whose server will listen on ``127.0.0.1:inner_port`` in it; None (logged) where
    none can be made."""
    if not netns.available():
        log.warning(
            "instance %s: EnableNetworkIsolation needs network namespaces (servekit up as root, or user namespaces"
            " allowed); it shares the network",
            instance_id,
        )
        return None
    try:
        ns = await asyncio.to_thread(netns.make)
    except OSError as exc:
        log.warning("instance %s: no network namespace (%s); it shares the network", instance_id, exc)
        return None

    async def connect() -> netns.Streams:  # from a socket made in the namespace, to the instance there
        sock = await asyncio.to_thread(ns.socket)
        try:
            await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", inner_port))
            return await asyncio.open_connection(sock=sock)
        except OSError:
            sock.close()
            raise

    try:
        server = await asyncio.start_server(netns.forwarder(connect), "127.0.0.1", 0)  # a port the kernel picks
    except OSError:
        await asyncio.to_thread(ns.close)
        raise
    return IsolatedNetwork(ns, int(server.sockets[0].getsockname()[1]), server)
