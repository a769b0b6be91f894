"""TopGun maps across a cluster, with real processes on loopback: a NATS server (JetStream) and
``octosync serve --cluster`` nodes; clients speak TopGun's MsgPack protocol over ``/topgun``.

Every wait is bounded, every process is killed in the fixture's finalizer, ports are free ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import signal
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest

from octosync.client.lazily import connect as lazily_connect
from octosync.crdt.op import OpRecord
from octosync.crdt.sync_messages import SyncInit, SyncRespRoot
from octosync.links import nats_server
from octosync.links.cluster_cli import start_node
from octosync.server.auth import issue_token
from octosync.store.journal import Journal
from octosync.topgun import durable
from octosync.wire import topgun as tg
from octosync.wire import topgun_services as sv
from tests.e2e.helpers import free_port
from tests.topgun.helpers import batch, put

MAP = "users"
CONFIG = """
[cluster]
map_sync_interval = 1.0
map_settle = 0.3
map_replicate_timeout = 20.0

[auth]
hs256_secret = "cluster-maps-secret-of-32-bytes-or-more"
"""
SECRET = "cluster-maps-secret-of-32-bytes-or-more"
ALL = 'map_hold = "all"'
"""These tests are of every node holding every map (held by interest:
``test_cluster_held_maps.py``)."""


@dataclass
class Node:
    id: str
    port: int
    data: Path
    proc: subprocess.Popen[bytes]

    @property
    def topgun(self) -> str:
        return f"ws://127.0.0.1:{self.port}/topgun"

    @property
    def lazily(self) -> str:
        return f"ws://127.0.0.1:{self.port}/lazily"

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)


@dataclass
class Cluster:
    url: str
    root: Path
    nats: subprocess.Popen[bytes]
    nodes: dict[str, Node] = field(default_factory=dict)

    def start(self, node_id: str, *, tokens: bool = False, cluster_keys: str = "") -> Node:
        """Start (or start again, on its data directory) node ``node_id`` (``tokens``: with
        ``[auth]`` on, not ``--insecure-dev``; ``cluster_keys``: more ``[cluster]`` lines)."""
        config = self.root / "octosync.toml"
        config.write_text(CONFIG.replace("[cluster]\n", f"[cluster]\n{cluster_keys}\n", 1))
        data = self.root / node_id
        port = free_port()
        extra = ["--config", str(config)]
        proc = start_node(self.url, node_id, port, data, extra=extra, insecure_dev=not tokens)
        node = self.nodes[node_id] = Node(node_id, port, data, proc)
        return node

    def stop(self) -> None:
        for proc in [self.nats, *(n.proc for n in self.nodes.values())]:
            if proc.poll() is None:
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)

    def restart_nats(self) -> None:
        """SIGKILL the NATS server and start it again on the same port and store."""
        self.nats.send_signal(signal.SIGKILL)
        self.nats.wait(timeout=10)
        port = int(self.url.rsplit(":", 1)[1])
        self.nats = nats_server.start(self.root / "nats", port)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    port = free_port()
    c = Cluster(f"nats://127.0.0.1:{port}", tmp_path, nats_server.start(tmp_path / "nats", port))
    try:
        c.start("n1", cluster_keys=ALL)
        c.start("n2", cluster_keys=ALL)
        yield c
    finally:
        c.stop()


async def until(predicate: Callable[[], bool], what: str, timeout: float = 20) -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    while loop.time() - start < timeout:
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Peer:
    """A TopGun client: every message it receives, collected in the background."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.inbox: list[tg.Message] = []
        self._task = asyncio.create_task(self._read())
        self._ids = itertools.count(1)

    async def _read(self) -> None:
        async for msg in self.ws:
            if msg.type == aiohttp.WSMsgType.BINARY:
                self.inbox.append(tg.decode(msg.data))

    @property
    def closed(self) -> bool:
        return self._task.done()

    async def send(self, message: Any) -> None:
        await self.ws.send_bytes(tg.encode(message))

    async def first(self, kind: type[Any], match: Callable[[Any], bool] = lambda _: True) -> Any:
        found: list[Any] = []

        def seen() -> bool:
            found[:] = [m for m in self.inbox if isinstance(m, kind) and match(m)]
            return bool(found)

        await until(seen, f"a {kind.__name__}", timeout=15)
        self.inbox.remove(found[0])
        return found[0]

    async def write(self, ops: list[tg.ClientOp], concern: str) -> tg.OpAck:
        await self.send(batch(*ops, write_concern=concern))
        last = ops[-1].id
        ack: tg.OpAck = await self.first(tg.OpAck, lambda m: m.payload.last_id == last)
        return ack

    async def read(self, name: str = MAP) -> dict[str, Any]:
        """The map's live entries as this node serves them (a live query's first answer)."""
        qid = f"q{next(self._ids)}"
        await self.send(tg.QuerySub(tg.QuerySubPayload(qid, name)))
        resp = await self.first(tg.QueryResp, lambda m: m.payload.query_id == qid)
        await self.send(tg.QueryUnsub(tg.QueryId(qid)))
        return {r.key: msgspec.msgpack.decode(r.value) for r in resp.payload.results}

    async def root(self, name: str = MAP) -> int:
        await self.send(SyncInit(map_name=name))
        reply: SyncRespRoot = await self.first(SyncRespRoot)
        return int(reply.payload.root_hash)

    def event_keys(self) -> set[str]:
        keys = set()
        for m in self.inbox:
            if isinstance(m, tg.ServerEvent):
                keys.add(m.payload.key)
            elif isinstance(m, tg.ServerBatchEvent):
                keys.update(e.key for e in m.payload.events)
        return keys


@contextlib.asynccontextmanager
async def peer(url: str, token: str | None = None) -> AsyncIterator[Peer]:
    """A raw TopGun client of the node at ``url``: a device, or with ``token`` AUTH."""
    async with aiohttp.ClientSession() as http:
        ws = await asyncio.wait_for(http.ws_connect(url), 10)
        p = Peer(ws)
        if token is None:
            await p.send(tg.DeviceHello())
            await p.first(tg.DeviceAck)
        else:
            await p.first(tg.AuthRequired)
            await p.send(tg.Auth(token=token))
            await p.first(tg.AuthAck)
        try:
            yield p
        finally:
            await ws.close()
            p._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await p._task


async def read_until(
    url: str, want: dict[str, Any], timeout: float = 20, token: str | None = None
) -> dict[str, Any]:
    """Read the map on the node at ``url`` (fresh clients) until it holds ``want``."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    got: dict[str, Any] = {}
    while loop.time() - start < timeout:
        async with peer(url, token) as p:
            got = await p.read()
        if all(got.get(k) == v for k, v in want.items()):
            return got
        await asyncio.sleep(0.2)
    missing = sorted(k for k, v in want.items() if got.get(k) != v)
    raise AssertionError(f"{len(missing)} of {len(want)} entries missing, e.g. {missing[:5]}")


def ops(start: int, n: int, *, node: str, millis: int = 1_700_000_000_000) -> list[tg.ClientOp]:
    return [
        put(str(i), f"k{i}", {"v": i, "by": node}, millis + i, node=node)
        for i in range(start, start + n)
    ]


@pytest.mark.slow
async def test_a_write_on_one_node_is_seen_live_on_another(cluster: Cluster) -> None:
    n1, n2 = cluster.nodes["n1"], cluster.nodes["n2"]
    async with (
        peer(n2.topgun) as watcher,
        peer(n1.topgun) as writer,
        lazily_connect(n2.lazily) as lazily_client,
    ):
        await watcher.root()  # the map open on node 2 (its events come to this client)
        await watcher.send(tg.QuerySub(tg.QuerySubPayload("live", MAP)))
        await watcher.first(tg.QueryResp)
        stream = await lazily_client.subscribe(f"map:{MAP}")
        ack = await writer.write(ops(1, 3, node="alice"), "APPLIED")
        assert ack.payload.achieved_level == "APPLIED"
        await until(lambda: watcher.event_keys() >= {"k1", "k2", "k3"}, "events on node 2")
        update = await watcher.first(tg.QueryUpdate, lambda m: m.payload.key == "k2")
        assert msgspec.msgpack.decode(update.payload.value) == {"v": 2, "by": "alice"}
        async with asyncio.timeout(15):
            async for state in stream:
                if {"k1", "k2", "k3"} <= set(state.by_name):
                    break
        # A write on node 2 comes back to a reader on node 1, and both end in one state.
        await watcher.write([put("9", "k1", "from-n2", 1_800_000_000_000, node="bob")], "MEMORY")
        await until(lambda: "k1" in writer.event_keys(), "node 2's write on node 1")
        assert await writer.read() == await watcher.read()
        assert await writer.root() == await watcher.root()
    metrics = await scrape(n2)
    assert metrics["octosync_cluster_maps_applied_total"] >= 3
    assert metrics["octosync_cluster_maps_published_total"] >= 1


async def scrape(node: Node) -> dict[str, float]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{node.port}/metrics") as response,
    ):
        text = await response.text()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


@pytest.mark.slow
async def test_a_replicated_ack_survives_sigkill_of_the_writing_node(cluster: Cluster) -> None:
    n1, n2 = cluster.nodes["n1"], cluster.nodes["n2"]
    written = ops(1, 50, node="alice")
    async with peer(n1.topgun) as writer:
        ack = await writer.write(written, "REPLICATED")
        n1.kill()  # at once: the only copy outside node 1 is what JetStream stored
    assert ack.payload.achieved_level == "REPLICATED"
    assert ack.payload.results is not None
    assert all(r.success for r in ack.payload.results)
    want = {f"k{i}": {"v": i, "by": "alice"} for i in range(1, 51)}
    await read_until(n2.topgun, want)
    n3 = cluster.start(
        "n3", cluster_keys=ALL
    )  # a node that never saw the writer: from JetStream alone
    await read_until(n3.topgun, want, timeout=5)


@pytest.mark.slow
async def test_a_replicated_ack_waits_until_jetstream_stored_the_batch(cluster: Cluster) -> None:
    n1, n2 = cluster.nodes["n1"], cluster.nodes["n2"]
    async with peer(n1.topgun) as writer:
        cluster.nats.send_signal(signal.SIGKILL)
        cluster.nats.wait(timeout=10)
        # Below REPLICATED nothing waits for the cluster, nor do the replies after it.
        await writer.send(batch(*ops(100, 2, node="alice"), write_concern="APPLIED"))
        await writer.send(tg.Ping(timestamp=0))
        async with asyncio.timeout(2):
            applied = await writer.first(tg.OpAck)
            await writer.first(tg.Pong)
        assert applied.payload.achieved_level == "APPLIED"
        await writer.send(batch(*ops(1, 5, node="alice"), write_concern="REPLICATED"))
        await writer.send(tg.Ping(timestamp=1))
        await asyncio.sleep(2.0)
        assert not any(isinstance(m, tg.OpAck | tg.Pong) for m in writer.inbox), (
            "acknowledged (or overtaken) while no JetStream was there to store it"
        )
        port = int(cluster.url.rsplit(":", 1)[1])
        cluster.nats = await asyncio.to_thread(nats_server.start, cluster.root / "nats", port)
        ack = await writer.first(tg.OpAck)
        assert ack.payload.achieved_level == "REPLICATED"
        assert isinstance(writer.inbox[0], tg.Pong)  # the reply queued behind the ack
    await read_until(n2.topgun, {f"k{i}": {"v": i, "by": "alice"} for i in range(1, 6)})


@pytest.mark.slow
async def test_without_a_cluster_replicated_is_not_claimed(tmp_path: Path) -> None:
    port = free_port()
    proc = start_node(None, "alone", port, tmp_path / "alone")
    try:
        async with peer(f"ws://127.0.0.1:{port}/topgun") as writer:
            ack = await writer.write(ops(1, 2, node="alice"), "REPLICATED")
        assert ack.payload.achieved_level == "APPLIED"
        assert ack.payload.results is not None
        assert not any(r.success for r in ack.payload.results)
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.slow
async def test_a_node_restarted_after_missing_writes_catches_up(cluster: Cluster) -> None:
    n1, n2 = cluster.nodes["n1"], cluster.nodes["n2"]
    async with peer(n1.topgun) as writer:
        await writer.write(ops(1, 20, node="alice"), "REPLICATED")
        await read_until(n2.topgun, {"k20": {"v": 20, "by": "alice"}})
        n2.kill()
        for start in range(21, 221, 50):
            ack = await writer.write(ops(start, 50, node="alice"), "REPLICATED")
            assert ack.payload.achieved_level == "REPLICATED"
    n2 = cluster.start(
        "n2", cluster_keys=ALL
    )  # its journal holds 1..20 and the position after them
    want = {f"k{i}": {"v": i, "by": "alice"} for i in range(1, 221)}
    # Caught up before its port opened: the first read has everything.
    await read_until(n2.topgun, want, timeout=1)
    n2.kill()
    with Journal(n2.data, readonly=True) as journal:
        records = list(journal.all_ops())
    keys = {r.key for r in records if r.map == MAP}
    assert keys >= set(want), "the replayed records were not journaled on node 2"
    positions = [r for r in records if r.map == durable.CLUSTER_MAP]
    assert positions, "no stream position was journaled"
    assert _position(positions) >= 5


@pytest.mark.slow
async def test_anti_entropy_repairs_what_the_op_stream_lost(cluster: Cluster) -> None:
    n1, n2 = cluster.nodes["n1"], cluster.nodes["n2"]
    n2.kill()
    async with peer(n1.topgun) as writer:
        ack = await writer.write(ops(1, 30, node="alice"), "REPLICATED")
        assert ack.payload.achieved_level == "REPLICATED"
    # The stream loses them (as limits or an operator's purge would): only node 1 has them.
    nc = await nats_server.connect(cluster.url)
    try:
        await nc.jetstream().purge_stream("octosync_octosync_maps")
    finally:
        await nc.close()
    n2 = cluster.start("n2", cluster_keys=ALL)
    want = {f"k{i}": {"v": i, "by": "alice"} for i in range(1, 31)}
    await read_until(n2.topgun, want, timeout=20)  # a sync round each second (CONFIG)
    metrics = await scrape(n2)
    assert metrics["octosync_cluster_maps_repaired_total"] >= 30
    assert metrics["octosync_cluster_maps_applied_total"] == 0


def _position(records: list[OpRecord]) -> int:
    winner = max(records, key=lambda r: (r.ts, r.op_id))
    return int(msgspec.msgpack.decode(winner.value))


@pytest.mark.slow
async def test_nats_restarted_under_load_loses_nothing_acknowledged(cluster: Cluster) -> None:
    n1, n2 = cluster.nodes["n1"], cluster.nodes["n2"]
    acked: dict[str, Any] = {}
    restarted = asyncio.Event()

    async def load(node: Node, name: str, base: int) -> None:
        """Batches of REPLICATED writes until 40 batches after the restart; a writer reset by
        its node (a batch not stored in time) connects again and sends the batch again."""
        i, after = 0, 0
        while after < 40 and i < 2000:
            batch_ops = ops(base + i * 10, 10, node=name)
            try:
                async with peer(node.topgun) as writer:
                    while after < 40 and i < 2000:
                        batch_ops = ops(base + i * 10, 10, node=name)
                        ack = await asyncio.wait_for(writer.write(batch_ops, "REPLICATED"), 25)
                        if ack.payload.achieved_level == "REPLICATED":
                            for op in batch_ops:
                                acked[op.key] = {"v": int(op.id or 0), "by": name}
                        i += 1
                        after += restarted.is_set()
                        await asyncio.sleep(0.01)
            except (AssertionError, aiohttp.ClientError, TimeoutError):
                await asyncio.sleep(0.2)  # reset while NATS was away: again, same batch

    loaders = [
        asyncio.create_task(load(n1, "alice", 0)),
        asyncio.create_task(load(n2, "bob", 100_000)),
    ]
    await until(lambda: len(acked) >= 300, "writes acknowledged before the restart")
    await asyncio.to_thread(cluster.restart_nats)
    restarted.set()
    await asyncio.wait_for(asyncio.gather(*loaders), 90)
    assert len(acked) >= 1000
    await read_until(n1.topgun, acked, timeout=30)
    await read_until(n2.topgun, acked, timeout=30)
    async with peer(n1.topgun) as a, peer(n2.topgun) as b:
        assert await a.read() == await b.read()


@pytest.mark.slow
@pytest.mark.peer
async def test_the_real_client_on_two_nodes_sees_one_state(
    cluster: Cluster, topgun_peer: tuple[str, Path]
) -> None:
    """TopGun's own client: writers on both nodes, a watcher on each sees every write live,
    and a client that connects late to either node gets it all by Merkle sync."""
    from tests.e2e.test_topgun_interop import EXPECTED, maps_of, start

    n1, n2 = (f"ws://127.0.0.1:{cluster.nodes[n].port}" for n in ("n1", "n2"))
    watchers = [
        await start(topgun_peer, url, "watch", seconds=8, node_id=f"w{i}")
        for i, url in enumerate((n1, n2))
    ]
    for w in watchers:
        await w.until("ready")
    alice = await start(
        topgun_peer,
        n1,
        "ops",
        'put=u1={"name":"Alice","age":30}',
        'put=u2={"name":"Bob","age":25}',
        "remove=u2",
        'oradd=post-1="rust"',
        'oradd=post-1="python"',
        'orremove=post-1="rust"',
        node_id="alice",
    )
    bob = await start(
        topgun_peer,
        n2,
        "ops",
        'put=u3={"name":"Carol","age":41}',
        'oradd=post-2="go"',
        node_id="bob",
    )
    for writer in (alice, bob):
        await writer.until("synced")
        await writer.end()
    lates = [
        await start(topgun_peer, url, "watch", seconds=6, node_id=f"late{i}")
        for i, url in enumerate((n1, n2))
    ]
    for client in (*watchers, *lates):
        await client.until("maps", lambda line: maps_of(line) == EXPECTED)
        await client.stop()
    # Each watcher saw the other node's writer live, not only by a later sync.
    for w, other_keys in zip(watchers, ({"u3", "post-2"}, {"u1", "post-1"}), strict=True):
        live = [m["payload"]["key"] for m in w.frames("in", "SERVER_EVENT")] + [
            e["key"] for m in w.frames("in", "SERVER_BATCH_EVENT") for e in m["payload"]["events"]
        ]
        assert other_keys <= set(live), f"events seen live: {sorted(set(live))}"


async def _partition_nodes(url: str, token: str) -> list[str]:
    async with peer(url, token) as p:
        await p.send(sv.PartitionMapRequest())
        got: sv.PartitionMap = await p.first(sv.PartitionMap)
    return sorted(n.node_id for n in got.payload.nodes)


async def wait_for_nodes(url: str, want: list[str], token: str) -> None:
    """Ask ``url`` for the partition map until it lists ``want`` (heartbeats take a moment)."""
    async with asyncio.timeout(30):
        while await _partition_nodes(url, token) != want:
            await asyncio.sleep(0.2)


@pytest.mark.slow
async def test_the_partition_map_lists_the_nodes_alive_and_drops_a_killed_one(
    tmp_path: Path,
) -> None:
    """Nodes that take tokens, as TopGun's cluster client expects of a cluster (it
    authenticates each node's connection when the node asks, ``AUTH_REQUIRED``)."""
    port = free_port()
    nats = nats_server.start(tmp_path / "nats", port)
    cluster = Cluster(f"nats://127.0.0.1:{port}", tmp_path, nats)
    token = issue_token(SECRET, "c", {}, maps={"*": ["read", "write"]})
    try:
        n1 = cluster.start("n1", tokens=True, cluster_keys=ALL)
        n2 = cluster.start("n2", tokens=True, cluster_keys=ALL)
        await wait_for_nodes(n1.topgun, ["n1", "n2"], token)
        async with peer(n2.topgun, token) as p:
            await p.send(sv.PartitionMapRequest(sv.PartitionMapRequestPayload(0)))
            both: sv.PartitionMap = await p.first(sv.PartitionMap)
        urls = {n.node_id: n.endpoints.websocket for n in both.payload.nodes}
        assert urls == {"n1": n1.topgun, "n2": n2.topgun}
        # the node asked owns every partition (a client writes to one node), backed by n1
        assert {(p.owner_node_id, *p.backup_node_ids) for p in both.payload.partitions} == {
            ("n2", "n1")
        }
        n1.kill()
        await wait_for_nodes(n2.topgun, ["n2"], token)
        async with peer(n2.topgun, token) as p:
            await p.send(sv.PartitionMapRequest())
            alone: sv.PartitionMap = await p.first(sv.PartitionMap)
        assert alone.payload.version > both.payload.version
        assert {p.owner_node_id for p in alone.payload.partitions} == {"n2"}
        async with peer(n2.topgun, token) as p:  # a write n1 would have owned, taken by n2
            ack = await p.write([put("1", "k1", {"a": 1}, 1_700_000_000_000)], "APPLIED")
        assert ack.payload.last_id == "1"
    finally:
        cluster.stop()
