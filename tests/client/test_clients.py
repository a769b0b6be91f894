"""The asyncio clients against a real server on loopback."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import octosync
from octosync import Context
from octosync.client import Backoff, SignalingClient, SignalingRefused, WvpClient
from octosync.errors import Forbidden, ForbiddenPublish, Unauthorized
from octosync.server.auth import AuthConfig, issue_token
from octosync.signaling.messages import OfferFrom, PeerJoined
from octosync.wire import wvp
from tests.e2e.helpers import serve


async def test_publish_a_context_and_watch_it(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv:
        url = f"{srv.ws_url}/lazily"
        ctx = Context()
        home = ctx.cell(0, type_tag="i64")
        away = ctx.cell(0, type_tag="i64")
        total = ctx.memo(lambda: home.get() + away.get(), type_tag="i64")
        async with octosync.connect(url) as producer, octosync.connect(url) as viewer:
            await producer.publish("scoreboard", ctx)
            sub = await viewer.subscribe("scoreboard")
            first = await asyncio.wait_for(anext(sub), 5)
            assert first.values[home.id] == 0
            with ctx.batch():
                home.set(3)
                away.set(2)
            state = await asyncio.wait_for(sub.wait_for(lambda s: s.values.get(total.id) == 5), 5)
            assert state.values[home.id] == 3
            assert sub.resyncs == 0


async def test_subscription_reconnects_after_the_server_drops_it(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv:
        url = f"{srv.ws_url}/lazily"
        ctx = Context()
        c = ctx.cell("a", type_tag="string")
        async with (
            octosync.connect(url) as producer,
            octosync.connect(url, backoff=Backoff(base=0.01, cap=0.05), seed=1) as viewer,
        ):
            await producer.publish("r", ctx)
            sub = await viewer.subscribe("r")
            await asyncio.wait_for(sub.wait_for(lambda s: s.values.get(c.id) == "a"), 5)
            subscriber_conns = srv.runtime.hub.subscribers_of("r")
            assert len(subscriber_conns) == 1
            await srv.runtime.links[subscriber_conns[0]].close(1001)
            c.set("b")
            state = await asyncio.wait_for(sub.wait_for(lambda s: s.values.get(c.id) == "b"), 5)
            assert state.values[c.id] == "b"
            assert sub.reconnects == 1


async def test_second_publisher_gets_forbidden_publish(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv:
        url = f"{srv.ws_url}/lazily"
        a, b = Context(), Context()
        a.cell(1, type_tag="i64")
        b.cell(2, type_tag="i64")
        async with octosync.connect(url) as first, octosync.connect(url) as second:
            await first.publish("p", a)
            watcher = await first.subscribe("p")
            await watcher.wait_for(lambda s: s.values == {0: 1})  # "p" has its producer now
            with pytest.raises(ForbiddenPublish, match="another connection"):
                await second.publish("p", b)


async def test_token_is_sent_and_refusal_is_typed(tmp_path: Path) -> None:
    secret = "client-test-secret-client-test-secret!!"
    async with serve(tmp_path, insecure_dev=False, auth=AuthConfig(hs256_secret=secret)) as srv:
        url = f"{srv.ws_url}/lazily"
        async with octosync.connect(url) as anonymous:
            with pytest.raises(Unauthorized):
                await anonymous.subscribe("s")
        token = issue_token(secret, "v", {"s": ["read"]})
        async with octosync.connect(url, token=token) as viewer:
            sub = await viewer.subscribe("s")
            assert sub.stream == "s"


async def test_wvp_client_roundtrip(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv:
        url = f"{srv.ws_url}/wvp"
        async with WvpClient(url) as prod, WvpClient(url) as view:
            assert view.ack is not None
            await view.subscribe(3)
            await asyncio.sleep(0.05)
            await prod.publish_snapshot(3, 0, {"n": 1})
            await prod.publish_diff(3, 0, [{"n": 2}])
            got = [await view.receive(5), await view.receive(5)]
            assert got == [
                wvp.WarpStream(3, wvp.WarpSnapshot(0, {"n": 1})),
                wvp.WarpStream(3, wvp.WarpDiff(0, 1, [{"n": 2}])),
            ]
            await view.publish_snapshot(3, 9, None)
            with pytest.raises(ForbiddenPublish) as refused:
                await view.receive(5)
            assert refused.value.path == "stream"
            assert not refused.value.message.startswith("stream:")


async def test_signaling_client(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv:
        url = f"{srv.ws_url}/signal"
        async with SignalingClient(url, "s") as a, SignalingClient(url, "s") as b:
            assert (await a.join(1)).peers == ()
            assert (await b.join(2)).peers == (1,)
            assert await a.receive(5) == PeerJoined(peer=2)
            await b.offer(1, "v=0")
            assert await a.receive(5) == OfferFrom(from_=2, sdp="v=0")
            async with SignalingClient(url, "s") as c:
                with pytest.raises(SignalingRefused) as refused:
                    await c.join(2)
                assert refused.value.code == "duplicate_peer"


async def test_subscription_resyncs_after_a_gap_from_a_faulty_upstream(tmp_path: Path) -> None:
    """A server that skips epochs: the client must ask for a snapshot and carry on."""
    from aiohttp import web

    from octosync.ipc.messages import CellSet, Delta, NodeSnapshot, ResyncRequest, Snapshot
    from octosync.server.lazily_session import server_handshake
    from octosync.wire import json as wire_json
    from tests.e2e.helpers import free_port

    requests: list[ResyncRequest] = []

    def state(epoch: int, value: int) -> Snapshot:
        payload = value.to_bytes(8, "big", signed=True)
        return Snapshot(epoch, (NodeSnapshot(0, "i64", "resolved", payload),), roots=(0,))

    def cell(base: int, value: int) -> Delta:
        return Delta(base, base + 1, (CellSet(0, value.to_bytes(8, "big", signed=True)),))

    async def faulty(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        hs = wire_json.decode_handshake((await ws.receive()).data)
        await ws.send_bytes(wire_json.encode_handshake(server_handshake(hs.session_id, 1 << 20)))
        for msg in (state(0, 10), cell(0, 11), cell(5, 99)):  # the last one skips epochs
            await ws.send_bytes(wire_json.encode(msg))
        req = wire_json.decode((await ws.receive()).data)
        assert isinstance(req, ResyncRequest)
        requests.append(req)
        await ws.send_bytes(wire_json.encode(state(6, 12)))
        await ws.receive()
        return ws

    app = web.Application()
    app.router.add_get("/lazily", faulty)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with octosync.connect(f"ws://127.0.0.1:{port}/lazily") as c:
            sub = await c.subscribe("x")
            epochs = []
            async for s in sub:
                epochs.append((s.epoch, s.values[0]))
                if s.epoch == 6:
                    break
        assert epochs == [(0, 10), (1, 11), (6, 12)]
        assert sub.resyncs == 1
        assert requests[0].last_epoch == 1
        assert requests[0].reason == "EpochGap"
    finally:
        await runner.cleanup()


async def test_publication_reconnects_and_republishes_a_snapshot(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv:
        url = f"{srv.ws_url}/lazily"
        ctx = Context()
        c = ctx.cell(1, type_tag="i64")
        fast = Backoff(base=0.01, cap=0.05)
        async with (
            octosync.connect(url, backoff=fast, seed=2) as producer,
            octosync.connect(url, backoff=fast, seed=3) as viewer,
        ):
            pub = await producer.publish("p", ctx)
            sub = await viewer.subscribe("p")
            await asyncio.wait_for(sub.wait_for(lambda s: s.values.get(c.id) == 1), 5)
            owner = srv.runtime.hub.producer_of("p")
            assert owner is not None
            await srv.runtime.links[owner].close(1001)
            for _ in range(200):
                if pub.reconnects and srv.runtime.hub.producer_of("p") not in (None, owner):
                    break
                await asyncio.sleep(0.01)
            assert pub.reconnects == 1
            c.set(2)
            state = await asyncio.wait_for(sub.wait_for(lambda s: s.values.get(c.id) == 2), 5)
            assert state.values[c.id] == 2


async def test_closing_the_client_ends_the_subscription(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv:
        client = octosync.connect(f"{srv.ws_url}/lazily")
        async with client:
            sub = await client.subscribe("nothing-here")
        states = [s async for s in sub]
        assert states == []


async def test_subscriber_writes_by_name_and_the_producer_applies_it(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv:
        url = f"{srv.ws_url}/lazily"
        ctx = Context()
        score = ctx.cell(0, type_tag="i64", name="score")
        ctx.memo(lambda: score.get() * 2, type_tag="i64", name="double")
        unnamed = ctx.cell("x", type_tag="string")
        async with octosync.connect(url) as producer, octosync.connect(url) as viewer:
            await producer.publish("game", ctx)
            sub = await viewer.subscribe("game")
            first = await asyncio.wait_for(sub.wait_for(lambda s: "score" in s.names), 5)
            assert first.by_name == {"score": 0, "double": 0}
            assert first.names == {"score": score.id, "double": score.id + 1}
            await sub.write("score", 21)
            state = await asyncio.wait_for(sub.wait_for(lambda s: s.by_name["double"] == 42), 5)
            assert state.by_name["score"] == 21
            assert score.get() == 21  # the producer's own graph took the write
            await sub.write(unnamed.id, "y")  # by id works for unnamed nodes
            await asyncio.wait_for(sub.wait_for(lambda s: s.values[unnamed.id] == "y"), 5)
            assert unnamed.get() == "y"
            assert sub.errors == []


async def test_a_write_without_the_grant_is_refused_with_forbidden(tmp_path: Path) -> None:
    secret = "client-test-secret-client-test-secret!!"
    async with serve(tmp_path, insecure_dev=False, auth=AuthConfig(hs256_secret=secret)) as srv:
        url = f"{srv.ws_url}/lazily"
        ctx = Context()
        score = ctx.cell(0, type_tag="i64", name="score")
        owner = issue_token(secret, "o", {"w": ["publish", "read", "write"]})
        reader = issue_token(secret, "r", {"w": ["read"]})
        async with (
            octosync.connect(url, token=owner) as p,
            octosync.connect(url, token=reader) as v,
        ):
            await p.publish("w", ctx)
            sub = await v.subscribe("w")
            await asyncio.wait_for(sub.wait_for(lambda s: "score" in s.names), 5)
            with pytest.raises(Forbidden, match="not granted write"):
                await sub.write("score", 5)  # the refusal answers the write itself
            assert [type(e) for e in sub.errors] == [Forbidden]
            assert "not granted write" in sub.errors[0].message
            assert score.get() == 0


async def test_a_refused_publication_raises_from_publish(tmp_path: Path) -> None:
    secret = "client-test-secret-client-test-secret!!"
    async with serve(tmp_path, insecure_dev=False, auth=AuthConfig(hs256_secret=secret)) as srv:
        reader = issue_token(secret, "r", {"s": ["read"]})
        async with octosync.connect(f"{srv.ws_url}/lazily", token=reader) as client:
            with pytest.raises(Forbidden, match="not granted publish"):
                await client.publish("s", Context())
            with pytest.raises(Forbidden, match="not granted read"):
                await client.subscribe("other")


async def test_a_client_that_loses_the_server_says_each_retry_and_gives_up(tmp_path: Path) -> None:
    retries: list[tuple[int, int | None, str]] = []
    server = serve(tmp_path)
    srv = await server.__aenter__()
    url = f"{srv.ws_url}/lazily"
    options = {"backoff": Backoff(base=0.01, cap=0.02, max_attempts=2)}

    def retrying(attempt: int, limit: int | None, why: BaseException) -> None:
        retries.append((attempt, limit, type(why).__name__))

    ctx = Context()
    ctx.cell(1, type_tag="i64", name="n")
    async with (
        octosync.connect(url, **options) as producer,
        octosync.connect(url, on_retry=retrying, **options) as viewer,
    ):
        publication = await producer.publish("gone", ctx)
        sub = await viewer.subscribe("gone")
        await asyncio.wait_for(anext(sub), 5)
        await server.__aexit__(None, None, None)  # the server goes away for good

        async def drain() -> None:
            async for _ in sub:
                pass

        await asyncio.wait_for(drain(), 10)  # the subscription ends: it does not hang
        assert isinstance(sub.lost, ConnectionError)
        assert str(sub.lost).startswith("gave up after 2 reconnect attempts (last: ")
        assert [(a, limit) for a, limit, _ in retries] == [(1, 2), (2, 2)]
        with pytest.raises(ConnectionError, match="gave up after 2 reconnect attempts"):
            await asyncio.wait_for(publication.wait(), 10)


async def test_the_base_url_and_the_js_names_work_as_in_the_javascript_client(
    tmp_path: Path,
) -> None:
    async with serve(tmp_path) as srv:
        ctx = Context()
        score = ctx.cell(7, type_tag="i64", name="score")
        # the server's base URL, as connect() takes it in JavaScript (its /lazily URL works too)
        async with (
            octosync.connect(srv.url) as producer,
            octosync.connect(f"{srv.ws_url}/lazily") as viewer,
        ):
            assert producer.url == f"{srv.ws_url}/lazily"
            await producer.publish("names", ctx)
            state = await asyncio.wait_for(anext(await viewer.subscribe("names")), 5)
            assert state.keys == state.names == {"score": score.id}
            assert state.by_name == {"score": 7}
