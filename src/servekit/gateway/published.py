"""The leader's routing table, shared through the state database with gateway replicas.

The leader's fleets publish an endpoint's routes (variants, weights, healthy instances and their URLs, shadows)
to its in-memory :class:`~servekit.gateway.service.RoutingTable` whenever they change: health, a deployment's
traffic step, UpdateEndpointWeightsAndCapacities, scale in or out. :class:`PublishedRoutingTable` is that table
writing each change through to :class:`~servekit.gateway.store.GatewayRoutes` as well, so the database
holds exactly what the leader routes by. A replica's :class:`RouteFollower` polls the routes' version counter
and applies the rows past the one it has, to a table of its own: replicas route as the leader does, one poll
interval later, each with its own outstanding counts.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson

from servekit._utils.background import BackgroundLoop
from servekit.gateway.service import InstanceRoute, RoutingTable, ShadowRoute, VariantRoute
from servekit.gateway.store import GatewayRoutes

log = logging.getLogger(__name__)

DEFAULT_POLL_S = 0.2  # a replica's routes trail the leader's by about this much; the poll is one indexed MAX


def _variant_doc(v: VariantRoute) -> dict[str, Any]:
    return {
        "name": v.name,
        "weight": v.weight,
        "instances": [[i.instance_id, i.url] for i in v.instances],
        "config_name": v.config_name,
        "multi_model": v.multi_model,
        "model_cache": v.model_cache,
    }


def _variant_of(d: dict[str, Any]) -> VariantRoute:
    return VariantRoute(
        str(d["name"]),
        float(d["weight"]),
        [InstanceRoute(str(i), str(u)) for i, u in d["instances"]],
        str(d.get("config_name", "")),
        d.get("multi_model"),
        bool(d.get("model_cache", True)),
    )


def routes_doc(variants: list[VariantRoute], shadows: list[ShadowRoute]) -> str:
    """An endpoint's routes as the JSON document replicas read (outstanding counts are each process's own)."""
    doc = {
        "variants": [_variant_doc(v) for v in variants],
        "shadows": [{"route": _variant_doc(s.route), "fraction": s.fraction} for s in shadows],
    }
    return orjson.dumps(doc).decode()


def routes_of(doc: str) -> tuple[list[VariantRoute], list[ShadowRoute]]:
    """The routes a :func:`routes_doc` document holds."""
    d = orjson.loads(doc)
    variants = [_variant_of(v) for v in d["variants"]]
    shadows = [ShadowRoute(_variant_of(s["route"]), float(s["fraction"])) for s in d.get("shadows", [])]
    return variants, shadows


class PublishedRoutingTable(RoutingTable):
    """The leader's routing table: each change is also recorded in the state database (only when an endpoint's
    routes actually differ from what was last recorded, so the version counter moves on real changes only)."""

    def __init__(self, routes: GatewayRoutes) -> None:
        super().__init__()
        self._routes = routes
        self._written: dict[str, str | None] = {}

    def set_endpoint(self, name: str, variants: list[VariantRoute]) -> None:
        super().set_endpoint(name, variants)
        self._write(name)

    def set_shadows(self, name: str, shadows: list[ShadowRoute]) -> None:
        super().set_shadows(name, shadows)
        self._write(name)

    def remove_endpoint(self, name: str) -> None:
        super().remove_endpoint(name)
        self._write(name)

    def _write(self, name: str) -> None:
        variants = self.variants(name)
        doc = routes_doc(variants, self.shadows(name)) if variants is not None else None
        if name in self._written and self._written[name] == doc:
            return
        try:
            self._routes.publish(name, doc)
        except Exception:  # the leader keeps serving; the next change of this endpoint writes it again
            log.exception("recording the routes of endpoint %s for gateway replicas failed", name)
            self._written.pop(name, None)
            return
        self._written[name] = doc


class RouteFollower(BackgroundLoop):
    """A replica's side: keeps ``table`` equal to the routes recorded in ``routes``, polling every ``poll_s``."""

    def __init__(self, routes: GatewayRoutes, table: RoutingTable, poll_s: float = DEFAULT_POLL_S) -> None:
        self._routes = routes
        self.table = table
        self._poll_s = poll_s
        self.version = 0  # the highest version applied

    def sync(self) -> int:
        """Apply what changed since the last sync; the number of endpoints whose routes changed."""
        if self._routes.version() <= self.version:
            return 0
        rows = self._routes.since(self.version)
        for row in rows:
            if row.doc is None:
                self.table.remove_endpoint(row.endpoint)
            else:
                variants, shadows = routes_of(row.doc)
                self.table.set_endpoint(row.endpoint, variants)
                self.table.set_shadows(row.endpoint, shadows)
            self.version = max(self.version, row.version)
        return len(rows)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._poll_s)
            try:
                self.sync()
            except Exception:  # a locked or briefly unreadable database: the next poll tries again
                log.exception("reading the gateway routes failed; keeping the current ones")
