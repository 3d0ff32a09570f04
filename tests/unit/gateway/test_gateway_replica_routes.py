"""The leader's routing table written through to SQLite and followed by a replica's table over another
connection (two connections to one real file, as two processes would have)."""

from __future__ import annotations

from pathlib import Path

from servekit.gateway.published import PublishedRoutingTable, RouteFollower, routes_doc, routes_of
from servekit.gateway.service import InstanceRoute, RoutingTable, ShadowRoute, VariantRoute
from servekit.gateway.store import GatewayRoutes
from servekit.services.database import StateDB


def _variants() -> list[VariantRoute]:
    return [
        VariantRoute("A", 0.25, [InstanceRoute("i-1", "http://127.0.0.1:1")], "cfg"),
        VariantRoute("A", 0.75, [InstanceRoute("i-2", "http://127.0.0.1:2")], "cfg2", "/models/", False),
    ]


def test_routes_document_round_trips() -> None:
    shadows = [ShadowRoute(VariantRoute("S", 1.0, [InstanceRoute("i-3", "http://h:3")], "cfg"), 0.5)]
    variants, back = routes_of(routes_doc(_variants(), shadows))
    assert variants == _variants()
    assert back == shadows


def test_follower_applies_changes_removals_and_a_restarted_leaders_clear(tmp_path: Path) -> None:
    with StateDB.open(tmp_path) as leader_db, StateDB.open(tmp_path) as replica_db:
        leader = PublishedRoutingTable(GatewayRoutes(leader_db.conn))
        follower = RouteFollower(GatewayRoutes(replica_db.conn), RoutingTable())
        assert follower.sync() == 0 and follower.table.variants("ep") is None

        leader.set_endpoint("ep", _variants())
        leader.set_endpoint("ep", _variants())  # unchanged: no new version
        assert GatewayRoutes(leader_db.conn).version() == 1
        assert follower.sync() == 1
        assert follower.table.variants("ep") == _variants()
        follower.table.variants("ep")[0].instances[0].outstanding = 3  # type: ignore[index]

        changed = _variants()
        changed[0].weight = 0.0
        leader.set_endpoint("ep", changed)
        leader.set_endpoint("other", _variants())
        assert follower.sync() == 2
        routed = follower.table.variants("ep")
        assert routed is not None and routed[0].weight == 0.0
        assert routed[0].instances[0].outstanding == 3  # the replica's own count survives a refresh

        leader.remove_endpoint("ep")
        assert follower.sync() == 1 and follower.table.variants("ep") is None
        assert GatewayRoutes(leader_db.conn).clear() == 1  # a restarting leader: "other" leaves too
        assert follower.sync() == 1 and follower.table.variants("other") is None
        assert follower.sync() == 0


def test_leader_address_is_recorded_once_and_replaced(tmp_path: Path) -> None:
    with StateDB.open(tmp_path) as db:
        routes = GatewayRoutes(db.conn, clock=lambda: 5.0)
        assert routes.leader() is None
        routes.record_leader("http://127.0.0.1:1", 60, 11)
        routes.record_leader("http://127.0.0.1:2", 2, 12)
        leader = routes.leader()
        assert leader is not None and (leader.url, leader.metrics_resolution_s, leader.pid, leader.started) == (
            "http://127.0.0.1:2",
            2,
            12,
            5.0,
        )
