"""The gateway against real HTTP upstreams on loopback: routing, pass-through, and errors in the runtime API's terms."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
from aiohttp import web

from servekit.backends.local import free_port
from servekit.gateway.service import Gateway, GatewayError, InstanceRoute, RoutingTable, VariantRoute

Handler = Callable[[web.Request], Awaitable[web.Response]]


@asynccontextmanager
async def upstream(handler: Handler) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/invocations", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def echo(name: str) -> Handler:
    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        headers = {"X-Amzn-SageMaker-Custom-Attributes": request.headers.get("X-Amzn-SageMaker-Custom-Attributes", "")}
        return web.Response(body=name.encode() + b":" + body, content_type="text/plain", headers=headers)

    return handle


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(main())


def test_bytes_pass_through_and_the_variant_is_reported() -> None:
    async def main() -> None:
        async with upstream(echo("a1")) as a1:
            table = RoutingTable()
            table.set_endpoint("ep", [VariantRoute("A", 1.0, [InstanceRoute("a1", a1)])])
            gw = Gateway(table, random.Random(1))
            try:
                out = await gw.invoke("ep", b"\x00raw\xff", "application/x-npy", "text/plain", "k=v")
            finally:
                await gw.close()
            assert out.body == b"a1:\x00raw\xff"
            assert out.variant == "A" and out.custom_attributes == "k=v"
            assert out.content_type.startswith("text/plain")

    run(main)


def test_weights_and_target_variant() -> None:
    async def main() -> None:
        async with upstream(echo("a")) as a, upstream(echo("b")) as b:
            table = RoutingTable()
            table.set_endpoint(
                "ep", [VariantRoute("A", 3.0, [InstanceRoute("a", a)]), VariantRoute("B", 1.0, [InstanceRoute("b", b)])]
            )
            gw = Gateway(table, random.Random(3))
            try:
                seen = [(await gw.invoke("ep", b"x")).variant for _ in range(400)]
                forced = {(await gw.invoke("ep", b"x", target_variant="B")).variant for _ in range(20)}
                with pytest.raises(GatewayError) as err:
                    await gw.invoke("ep", b"x", target_variant="C")
            finally:
                await gw.close()
            assert 0.65 < seen.count("A") / len(seen) < 0.85  # 3:1, 400 draws: far outside chance if wrong
            assert forced == {"B"}
            assert err.value.code == "ValidationError" and "C" in err.value.message

    run(main)


def test_concurrent_requests_go_to_the_least_busy_instance() -> None:
    async def main() -> None:
        release, all_held = asyncio.Event(), asyncio.Event()
        hits: dict[str, int] = {"i1": 0, "i2": 0}

        def slow(name: str) -> Handler:
            async def handle(request: web.Request) -> web.Response:
                hits[name] += 1
                if sum(hits.values()) == 10:
                    all_held.set()
                await release.wait()
                return web.Response(body=name.encode())

            return handle

        async with upstream(slow("i1")) as i1, upstream(slow("i2")) as i2:
            table = RoutingTable()
            table.set_endpoint("ep", [VariantRoute("A", 1.0, [InstanceRoute("i1", i1), InstanceRoute("i2", i2)])])
            gw = Gateway(table, random.Random(5))
            try:
                calls = [asyncio.create_task(gw.invoke("ep", b"x")) for _ in range(10)]
                await asyncio.wait_for(all_held.wait(), 30)  # every request reached an instance and is held
                assert hits == {"i1": 5, "i2": 5}
                release.set()
                bodies = [(await c).body for c in calls]
                assert sorted(bodies) == [b"i1"] * 5 + [b"i2"] * 5
            finally:
                await gw.close()

    run(main)


def test_a_model_error_is_424_with_the_original_status_and_message() -> None:
    async def fail(request: web.Request) -> web.Response:
        return web.json_response({"error": "bad input"}, status=400)

    async def main() -> None:
        async with upstream(fail) as u:
            table = RoutingTable()
            table.set_endpoint("ep", [VariantRoute("A", 1.0, [InstanceRoute("u", u)])])
            gw = Gateway(table)
            try:
                with pytest.raises(GatewayError) as err:
                    await gw.invoke("ep", b"{}", "application/json")
            finally:
                await gw.close()
            e = err.value
            assert (e.code, e.status) == ("ModelError", 424)
            assert e.extra["OriginalStatusCode"] == 400
            assert "bad input" in str(e.extra["OriginalMessage"])

    run(main)


def test_a_dead_instance_is_skipped_and_none_left_is_503() -> None:
    async def main() -> None:
        dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
        async with upstream(echo("live")) as live:
            table = RoutingTable()
            table.set_endpoint(
                "ep", [VariantRoute("A", 1.0, [InstanceRoute("dead", dead), InstanceRoute("live", live)])]
            )
            gw = Gateway(table, random.Random(0))
            try:
                assert {(await gw.invoke("ep", b"x")).body for _ in range(10)} == {b"live:x"}
                table.set_endpoint("ep", [VariantRoute("A", 1.0, [InstanceRoute("dead", dead)])])
                with pytest.raises(GatewayError) as err:
                    await gw.invoke("ep", b"x")
                assert (err.value.code, err.value.status) == ("ServiceUnavailable", 503)
                table.set_endpoint("ep", [VariantRoute("A", 1.0, [])])
                with pytest.raises(GatewayError) as err:
                    await gw.invoke("ep", b"x")
                assert err.value.code == "ServiceUnavailable"
                with pytest.raises(GatewayError) as err:
                    await gw.invoke("nope", b"x")
                assert err.value.code == "ValidationError"
            finally:
                await gw.close()

    run(main)
