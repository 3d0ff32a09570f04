"""The gateway reports the model's time for CloudWatch's ModelLatency: the instance's ``x-servekit-total-ms`` when it
answers one, else the upstream round trip; failures name the variant they reached."""

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


async def timed(request: web.Request) -> web.Response:
    return web.Response(body=b"ok", headers={"x-servekit-total-ms": "12.500"})


async def plain(request: web.Request) -> web.Response:
    return web.Response(body=b"ok")


async def refuse(request: web.Request) -> web.Response:
    return web.Response(status=415, body=b"unsupported")


def test_model_time_from_the_header_else_the_round_trip_and_errors_name_the_variant() -> None:
    async def main() -> None:
        async with upstream(timed) as a, upstream(plain) as b, upstream(refuse) as c:
            table = RoutingTable()
            table.set_endpoint(
                "ep",
                [
                    VariantRoute("A", 1.0, [InstanceRoute("a", a)]),
                    VariantRoute("B", 1.0, [InstanceRoute("b", b)]),
                    VariantRoute("C", 1.0, [InstanceRoute("c", c)]),
                    VariantRoute("D", 1.0, []),
                ],
            )
            gw = Gateway(table, random.Random(1))
            try:
                with_header = await gw.invoke("ep", b"x", target_variant="A")
                round_trip = await gw.invoke("ep", b"x", target_variant="B")
                with pytest.raises(GatewayError) as model_error:
                    await gw.invoke("ep", b"x", target_variant="C")
                with pytest.raises(GatewayError) as unavailable:
                    await gw.invoke("ep", b"x", target_variant="D")
            finally:
                await gw.close()
            assert with_header.model_s == pytest.approx(0.0125)
            assert round_trip.model_s is not None and 0 < round_trip.model_s < 30
            assert model_error.value.code == "ModelError"
            assert model_error.value.extra["VariantName"] == "C"
            assert model_error.value.extra["OriginalStatusCode"] == 415
            assert 0 < float(model_error.value.extra["ModelSeconds"]) < 30  # type: ignore[arg-type]
            assert unavailable.value.code == "ServiceUnavailable"
            assert unavailable.value.extra == {"VariantName": "D"}

    asyncio.run(main())
