"""TopGun maps held by interest (``[cluster] map_hold = "interest"``), with real processes on
loopback: a NATS server (JetStream, with its monitoring port for ``/connz``), three ``octosync
serve --cluster`` nodes, and raw TopGun clients over ``/topgun``.

A node holds the maps its clients name: it loads one from JetStream (snapshot, then the map's
subject) on the first message naming it, follows only that map's subject, and lets it go when
it has been idle. Every wait is bounded; every process is killed in the fixture's finalizer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest

from octosync.client.lazily import connect as lazily_connect
from octosync.crdt.sync_messages import WireTimestamp
from octosync.links import nats_server
from octosync.links.cluster_cli import cluster_status
from octosync.links.cluster_link import token
from octosync.links.cluster_maps import MapSubjects
from octosync.server.auth import issue_token
from octosync.wire import cluster_maps as wire
from octosync.wire import topgun as tg
from octosync.wire import topgun_http as th
from tests.e2e.helpers import free_port
from tests.e2e.test_cluster_held import connection_of, monitored_cluster, until_metric
from tests.e2e.test_cluster_maps import SECRET, Cluster, Node, Peer, peer, scrape
from tests.topgun.helpers import batch, put

TIMEOUT = 60.0
WRITTEN = 60
OPENED = 5
STREAM = "octosync_octosync_maps"
BUCKET = "octosync_octosync_map_snapshots"
KEYS = 'map_hold = "interest"\nmap_snapshot_interval = 0.5\nmap_load_timeout = 20.0'
MILLIS = 1_700_000_000_000


@pytest.fixture
def monitored(tmp_path: Path) -> Iterator[tuple[Cluster, int]]:
    with monitored_cluster(tmp_path, KEYS) as both:
        yield both


def name(i: int) -> str:
    return f"board/{i}"  # a '/' that no subject token may hold as it is


async def write_maps(node: Node, names: list[str], value: int) -> None:
    """Each map gets key ``k`` set to ``value`` through ``node``, acknowledged as applied."""
    async with peer(node.topgun) as p:
        for i, map_name in enumerate(names):
            op = put(f"{map_name}-{value}", "k", value, MILLIS + value * 10_000 + i, node="w")
            op = msgspec.structs.replace(op, map_name=map_name)
            await p.send(batch(op, write_concern="APPLIED"))
        last = f"{names[-1]}-{value}"
        await p.first(tg.OpAck, lambda m: m.payload.last_id == last)


async def subscribe(p: Peer, map_name: str) -> dict[str, Any]:
    """A live query on the map; its first answer."""
    await p.send(tg.QuerySub(tg.QuerySubPayload(map_name, map_name)))
    resp = await p.first(tg.QueryResp, lambda m: m.payload.query_id == map_name)
    return {r.key: msgspec.msgpack.decode(r.value) for r in resp.payload.results}


async def held(node: Node) -> float:
    return (await scrape(node))["octosync_cluster_maps_held"]


@pytest.mark.slow
async def test_a_node_holds_and_receives_only_the_maps_its_clients_use(
    monitored: tuple[Cluster, int],
) -> None:
    """Maps written through A; a client on C opens 5: C holds those 5, its consumers filter
    exactly their subjects, it receives from NATS fewer messages than the other maps' writes,
    and A's writes to the 5 reach C's client live. A write through C to a map C does not hold
    waits for its load and lands beside A's entries."""
    cluster, monitor = monitored
    a, b = cluster.nodes["n1"], cluster.nodes["n2"]
    c = cluster.start("n3", cluster_keys=KEYS)
    names = [name(i) for i in range(WRITTEN)]
    await write_maps(a, names, 1)
    assert await held(b) == 0  # nobody uses them on B: nothing loaded there
    opened = names[:: WRITTEN // OPENED][:OPENED]
    async with peer(c.topgun) as reader:
        for map_name in opened:  # loaded from JetStream: A's write is there
            assert await subscribe(reader, map_name) == {"k": 1}
        assert await held(c) == OPENED
        metrics = await scrape(c)
        assert metrics["octosync_cluster_maps_loads_total"] == OPENED
        status = await cluster_status(cluster.url, listen=2.5)  # `octosync cluster status`
        rows = {row["node"]: row for row in status["nodes"]}
        assert rows["n3"]["maps_held"] == OPENED
        assert rows["n3"]["maps"] == sorted(opened)
        assert rows["n2"]["maps_held"] == 0

        # C's consumers of the maps' stream filter exactly the opened maps' subjects
        mine = await connection_of(monitor, c)
        inboxes = set(mine.get("subscriptions_list") or [])  # type: ignore[call-overload]
        nc = await nats_server.connect(cluster.url)
        try:
            filters = set()
            for info in await nc.jetstream().consumers_info(STREAM):
                if info.config.deliver_subject in inboxes:
                    filters.add(info.config.filter_subject)
        finally:
            await nc.close()
        subjects = MapSubjects("octosync")
        assert filters == {subjects.map(n) for n in opened}

        # A writes the other maps and the opened ones; C's connection takes the latter only
        before = int(mine["out_msgs"])  # type: ignore[call-overload]
        others = [n for n in names if n not in opened]
        await write_maps(a, [*others, *opened], 2)
        for map_name in opened:  # live, through C
            update = await reader.first(
                tg.QueryUpdate, lambda m, q=map_name: m.payload.query_id == q
            )
            assert msgspec.msgpack.decode(update.payload.value) == 2
        taken = int((await connection_of(monitor, c))["out_msgs"]) - before  # type: ignore[call-overload]
        assert taken < len(others) // 2, f"C took {taken} messages for {len(others)} others"
        assert await held(c) == OPENED

        # a write through C to a map it does not hold: it waits for the load, then lands
        target = others[0]
        op = msgspec.structs.replace(
            put("c-1", "c", "from-c", MILLIS * 2, node="c"), map_name=target
        )
        ack = await reader.write([op], "APPLIED")
        assert ack.payload.achieved_level == "APPLIED"
        assert await held(c) == OPENED + 1
        assert await subscribe(reader, target) == {"k": 2, "c": "from-c"}
    for _ in range(int(TIMEOUT / 0.2)):  # and reaches A, a holder of it
        async with peer(a.topgun) as on_a:
            if await subscribe(on_a, target) == {"k": 2, "c": "from-c"}:
                break
        await asyncio.sleep(0.2)
    else:
        raise AssertionError("C's write never reached A")


@pytest.mark.slow
async def test_an_idle_map_is_let_go_and_loaded_again_with_nothing_lost(tmp_path: Path) -> None:
    """With a one-second idle time: a map written and closed on A is let go (its snapshot
    written to the bucket), then named again on A, loaded from the snapshot and the subject
    after it, with every entry."""
    port = free_port()
    cluster = Cluster(f"nats://127.0.0.1:{port}", tmp_path, nats_server.start(tmp_path / "n", port))
    try:
        a = cluster.start("n1", cluster_keys=KEYS + "\nmap_idle = 1.0")
        want = {f"k{i}": i for i in range(25)}
        async with peer(a.topgun) as p:
            written = [put(f"o{i}", f"k{i}", i, MILLIS + i, map_name="idle") for i in range(25)]
            ack = await p.write(written, "APPLIED")
            assert ack.payload.achieved_level == "APPLIED"
        await until_metric(a, "octosync_cluster_maps_held", 0)
        metrics = await scrape(a)
        assert metrics["octosync_cluster_maps_releases_total"] == 1
        nc = await nats_server.connect(cluster.url)
        try:
            entry = await (await nc.jetstream().key_value(BUCKET)).get(token("idle"))
            snapshot = wire.decode(entry.value or b"")
            assert isinstance(snapshot, wire.MapSnapshot)
            assert snapshot.map == "idle"
            assert {r.key for r in snapshot.records} == set(want)
        finally:
            await nc.close()
        async with peer(a.topgun) as again:
            assert await subscribe(again, "idle") == want
            ack = await again.write(
                [put("o99", "k99", 99, MILLIS + 99, map_name="idle")], "APPLIED"
            )
            assert ack.payload.achieved_level == "APPLIED"
        metrics = await scrape(a)
        assert metrics["octosync_cluster_maps_loads_total"] == 2
        assert metrics["octosync_cluster_maps_held"] == 1
    finally:
        cluster.stop()


@pytest.mark.slow
async def test_an_http_sync_request_waits_for_the_load_of_the_maps_it_names(
    tmp_path: Path,
) -> None:
    """``POST /topgun/sync`` on a node that let the map go: its write is applied after the
    load (never to an empty copy), and its query answers the whole map."""
    port = free_port()
    cluster = Cluster(f"nats://127.0.0.1:{port}", tmp_path, nats_server.start(tmp_path / "n", port))
    try:
        a = cluster.start("n1", cluster_keys=KEYS + "\nmap_idle = 1.0")
        async with peer(a.topgun) as p:
            written = [put(f"o{i}", f"k{i}", i, MILLIS + i, map_name="http") for i in range(10)]
            await p.write(written, "APPLIED")
        await until_metric(a, "octosync_cluster_maps_held", 0)
        request = th.HttpSyncRequest(
            client_id="c",
            client_hlc=WireTimestamp(MILLIS, 0, "c"),
            operations=[put("h1", "k10", 10, MILLIS + 10, map_name="http")],
            queries=[th.HttpQueryRequest("q", "http")],
        )
        url = f"http://127.0.0.1:{a.port}/topgun/sync"
        async with (
            aiohttp.ClientSession() as http,
            http.post(url, data=msgspec.msgpack.encode(request)) as resp,
        ):
            assert resp.status == 200
            body = msgspec.msgpack.decode(await resp.read())
        (result,) = body["queryResults"]
        got = {r["key"]: r["value"] for r in result["results"]}
        assert got == {f"k{i}": i for i in range(11)}
        metrics = await scrape(a)
        assert metrics["octosync_cluster_maps_loads_total"] == 2
    finally:
        cluster.stop()


@pytest.mark.slow
async def test_a_map_stream_starts_once_its_map_is_loaded(tmp_path: Path) -> None:
    """A lazily client subscribing to ``map:<name>`` on a node that let the map go: the
    stream's snapshot waits for the load (it holds every entry, not an empty copy's), and the
    node holds the map while it streams it."""
    port = free_port()
    cluster = Cluster(f"nats://127.0.0.1:{port}", tmp_path, nats_server.start(tmp_path / "n", port))
    try:
        a = cluster.start("n1", cluster_keys=KEYS + "\nmap_idle = 1.0")
        async with peer(a.topgun) as p:
            written = [put(f"o{i}", f"k{i}", i, MILLIS + i, map_name="streamed") for i in range(8)]
            await p.write(written, "APPLIED")
        await until_metric(a, "octosync_cluster_maps_held", 0)
        async with lazily_connect(a.lazily) as client:
            stream = await client.subscribe("map:streamed")
            async with asyncio.timeout(TIMEOUT):
                async for state in stream:
                    assert set(state.by_name) == {f"k{i}" for i in range(8)}
                    break
            await asyncio.sleep(2.5)  # past map_idle: streamed, so still held
            assert await held(a) == 1
    finally:
        cluster.stop()


@pytest.mark.slow
async def test_held_maps_are_followed_again_after_nats_restarts(
    monitored: tuple[Cluster, int],
) -> None:
    """NATS SIGKILLed and started again while a node holds a map: another node's writes still
    reach the holder's live query (its consumer is there again, or made again)."""
    cluster, _ = monitored
    a, b = cluster.nodes["n1"], cluster.nodes["n2"]
    async with peer(a.topgun) as reader, peer(b.topgun) as writer:
        assert await subscribe(reader, "live") == {}
        for value in (1, 2):
            op = put(f"w{value}", "k", value, MILLIS + value, map_name="live")
            ack = await writer.write([op], "APPLIED")
            assert ack.payload.achieved_level == "APPLIED"
            update = await reader.first(
                tg.QueryUpdate,
                lambda m, v=value: msgspec.msgpack.decode(m.payload.value) == v,
            )
            assert update.payload.key == "k"
            if value == 1:
                await asyncio.to_thread(cluster.restart_nats)


@pytest.mark.slow
async def test_anti_entropy_repairs_a_map_between_its_holders_only(
    monitored: tuple[Cluster, int],
) -> None:
    """A's writes to a map, then its subject purged: B loads the map empty, and anti-entropy
    (between the two holders, over that map) brings A's entries to B's live query; C, which
    never held the map, walks nothing."""
    cluster, _ = monitored
    a, b = cluster.nodes["n1"], cluster.nodes["n2"]
    c = cluster.start("n3", cluster_keys=KEYS)
    async with peer(a.topgun) as on_a:
        await on_a.write(
            [put(f"o{i}", f"k{i}", i, MILLIS + i, map_name="ae") for i in range(5)], "APPLIED"
        )
        nc = await nats_server.connect(cluster.url)
        try:
            await nc.jetstream().purge_stream(STREAM, subject=MapSubjects("octosync").map("ae"))
        finally:
            await nc.close()
        async with peer(b.topgun) as on_b:
            got = await subscribe(on_b, "ae")
            assert got == {}  # what JetStream still had: nothing
            want = {f"k{i}": i for i in range(5)}
            for _ in range(int(TIMEOUT / 0.1)):  # repaired from A
                for m in on_b.inbox:
                    if isinstance(m, tg.QueryUpdate) and m.payload.query_id == "ae":
                        got[m.payload.key] = msgspec.msgpack.decode(m.payload.value)
                if got == want:
                    break
                await asyncio.sleep(0.1)
            assert got == want
            metrics = await scrape(b)
            assert metrics["octosync_cluster_maps_repaired_total"] >= 5
    assert (await scrape(c))["octosync_cluster_maps_walks_total"] == 0


@pytest.mark.slow
async def test_maps_journaled_while_every_node_held_them_are_loaded_by_interest(
    tmp_path: Path,
) -> None:
    """A node that held every map (``map_hold = "all"``, its journal the record) starts again
    holding by interest after the stream lost the map's history (its age limit, here a purge):
    it publishes its journal's maps once, and another node loads them from JetStream."""
    port = free_port()
    cluster = Cluster(f"nats://127.0.0.1:{port}", tmp_path, nats_server.start(tmp_path / "n", port))
    try:
        a = cluster.start("n1", cluster_keys='map_hold = "all"')
        async with peer(a.topgun) as p:
            await p.write(
                [put(f"o{i}", f"k{i}", i, MILLIS + i, map_name="old") for i in range(6)], "APPLIED"
            )
        a.kill()
        nc = await nats_server.connect(cluster.url)
        try:
            await nc.jetstream().purge_stream(STREAM)
        finally:
            await nc.close()
        a = cluster.start("n1", cluster_keys=KEYS)  # the same data folder
        b = cluster.start("n2", cluster_keys=KEYS)
        async with peer(b.topgun) as on_b:
            assert await subscribe(on_b, "old") == {f"k{i}": i for i in range(6)}
        assert (a.data / "maps-in-jetstream").exists()
        assert await held(a) == 0  # what its journal brought back is not held
    finally:
        cluster.stop()


@pytest.mark.slow
async def test_a_map_the_token_may_not_use_is_never_loaded(tmp_path: Path) -> None:
    """A connection naming a map its token grants nothing of is refused as without a cluster,
    and the node loads nothing for it: no client makes a node hold maps it may not use."""
    port = free_port()
    cluster = Cluster(f"nats://127.0.0.1:{port}", tmp_path, nats_server.start(tmp_path / "n", port))
    token = issue_token(SECRET, "c", {}, maps={"mine": ["read", "write"]})
    try:
        a = cluster.start("n1", tokens=True, cluster_keys=KEYS)
        async with peer(a.topgun, token) as p:
            await p.send(
                batch(put("t1", "k", 1, MILLIS, map_name="theirs"), write_concern="APPLIED")
            )
            refused = await p.first(tg.OpRejected)
            assert refused.payload.op_id == "t1"
            ack = await p.write([put("m1", "k", 1, MILLIS, map_name="mine")], "APPLIED")
            assert ack.payload.achieved_level == "APPLIED"
            metrics = await scrape(a)
            assert metrics["octosync_cluster_maps_loads_total"] == 1
            status = await cluster_status(cluster.url, listen=2.5)
            (row,) = status["nodes"]
            assert row["maps"] == ["mine"]
    finally:
        cluster.stop()
