"""Real processes on loopback: a NATS server (JetStream) and three ``octosync serve --cluster``
nodes; producers and subscribers are the project's Python client.

Every wait is bounded, every process is killed in the fixture's finalizer, ports are free ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import signal
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from octosync.client.lazily import (
    Backoff,
    Client,
    Publication,
    Subscription,
    Writer,
    connect,
)
from octosync.client.wvp import WvpClient
from octosync.errors import Forbidden, ForbiddenPublish, OctosyncError
from octosync.graph import Context
from octosync.ipc.permissions import PeerPermissions
from octosync.links import cluster_link, nats_server
from octosync.links.cluster_cli import cluster_status, start_node
from octosync.wire import cluster as cluster_wire
from octosync.wire import wvp
from tests.e2e.helpers import free_port, handshake

STREAM = "match"
FAST = Backoff(base=0.05, cap=0.3)


@dataclass
class Node:
    id: str
    url: str
    proc: subprocess.Popen[bytes]

    @property
    def wvp_url(self) -> str:
        return self.url.replace("/lazily", "/wvp")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)


@dataclass
class Cluster:
    nats_url: str
    nodes: list[Node]
    procs: list[subprocess.Popen[bytes]]
    nats_dir: Path

    def restart_nats(self) -> None:
        """SIGKILL the NATS server and start it again on the same port and store."""
        self.kill_nats()
        self.start_nats()

    def kill_nats(self) -> None:
        nats = self.procs[0]
        nats.send_signal(signal.SIGKILL)
        nats.wait(timeout=10)

    def start_nats(self) -> None:
        port = int(self.nats_url.rsplit(":", 1)[1])
        self.procs[0] = nats_server.start(self.nats_dir, port)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    nats_port = free_port()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(nats_server.start(tmp_path / "nats", nats_port))
        url = f"nats://127.0.0.1:{nats_port}"
        nodes = []
        for i in (1, 2, 3):
            port = free_port()
            proc = start_node(url, f"n{i}", port, tmp_path / f"n{i}")
            procs.append(proc)
            nodes.append(Node(f"n{i}", f"ws://127.0.0.1:{port}/lazily", proc))
        yield Cluster(url, nodes, procs, tmp_path / "nats")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)


async def until(predicate: Callable[[], bool], what: str, timeout: float = 20) -> float:
    """Wait (bounded) for ``predicate``; returns the seconds it took."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    while loop.time() - start < timeout:
        if predicate():
            return loop.time() - start
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Counter:
    """A producer's context: one named cell that counts its flushes."""

    def __init__(self) -> None:
        self.ctx = Context()
        self.cell = self.ctx.cell(0, type_tag="i64", name="n")

    def bump(self) -> int:
        value = int(self.cell.get()) + 1
        self.cell.set(value)
        return value


@contextlib.asynccontextmanager
async def in_background(work: Coroutine[Any, Any, None]) -> AsyncIterator[None]:
    """``work`` runs as a task for the block, cancelled (and awaited) when it ends."""
    task = asyncio.create_task(work)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@contextlib.asynccontextmanager
async def watching(client: Client, stream: str = STREAM) -> AsyncIterator[list[int]]:
    """Every value of ``n`` the subscription yields, in order, collected in the background."""
    sub = await client.subscribe(stream, queue_size=100_000)
    seen: list[int] = []

    async def collect() -> None:
        async for state in sub:
            value = state.by_name.get("n")
            if value is not None:
                seen.append(int(value))

    async with in_background(collect()):
        yield seen


async def publish(client: Client, counter: Counter) -> Publication:
    return await asyncio.wait_for(client.publish(STREAM, counter.ctx), 10)


async def bump_until(
    counter: Counter, done: Callable[[], bool], *, limit: int = 2000, every: float = 0.01
) -> int:
    """Flush once per ``every`` until ``done`` (bounded by ``limit`` flushes)."""
    for _ in range(limit):
        if done():
            break
        counter.bump()
        await asyncio.sleep(every)
    return int(counter.cell.get())


async def _within(coro: Awaitable[None], seconds: float) -> None:
    await asyncio.wait_for(coro, seconds)


async def scrape(node: Node) -> dict[str, float]:
    """The node's unlabelled metrics from ``/metrics``."""
    http_url = node.url.replace("ws://", "http://").replace("/lazily", "/metrics")
    async with aiohttp.ClientSession() as http, http.get(http_url) as response:
        text = await response.text()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


async def hub_epoch(node: Node, stream: str) -> int:
    """The stream's epoch in the node's hub, from its ``/api/streams``."""
    http_url = node.url.replace("ws://", "http://").replace("/lazily", "/api/streams")
    async with aiohttp.ClientSession() as http, http.get(http_url) as response:
        rows = (await response.json())["streams"]
    (epoch,) = [row["epoch"] for row in rows if row["stream"] == stream]
    return int(epoch)


async def kept_reaches(nats_url: str, stream: str, epoch: int) -> None:
    """Poll the JetStream snapshots bucket until the stream's kept snapshot is at ``epoch``."""
    nc = await cluster_link.connect(nats_url)
    try:
        subjects = cluster_link.Subjects(cluster_link.DEFAULT_CLUSTER)
        kept = await cluster_link.owners_bucket(nc, subjects, subjects.snapshots_bucket)
        while True:
            with contextlib.suppress(Exception):  # not there yet
                entry = await kept.get(cluster_link.token(stream))
                frame = cluster_wire.decode(entry.value or b"")
                if isinstance(frame, cluster_wire.ClusterFrame) and frame.to_epoch >= epoch:
                    return
            await asyncio.sleep(0.05)
    finally:
        await nc.close()


def _contiguous(values: list[int]) -> bool:
    return all(b == a + 1 for a, b in itertools.pairwise(values))


@pytest.mark.slow
async def test_deltas_reach_other_nodes_in_order_and_a_second_producer_is_refused(
    cluster: Cluster,
) -> None:
    n1, n2, n3 = cluster.nodes
    counter = Counter()
    async with (
        connect(n1.url) as producer,
        connect(n2.url) as c2,
        connect(n3.url) as c3,
        connect(n2.url, backoff=Backoff(max_attempts=1)) as rival,
    ):
        pub = await publish(producer, counter)
        async with watching(c2) as on2, watching(c3) as on3:
            await until(lambda: bool(on2) and bool(on3), "both subscribers' first state")
            first2, first3 = on2[0], on3[0]
            for _ in range(300):
                counter.bump()
                await asyncio.sleep(0.002)
            last = int(counter.cell.get())
            await until(lambda: on2[-1:] == [last] and on3[-1:] == [last], "the last delta")
            # Every delta after the snapshot each joined with, once, in order.
            assert on2 == list(range(first2, last + 1))
            assert on3 == list(range(first3, last + 1))
            assert last - max(first2, first3) >= 250

            status = await cluster_status(cluster.nats_url, listen=1.2)
            assert status["owners"] == {STREAM: "n1"}
            by_node = {n["node"]: n for n in status["nodes"]}
            assert sorted(by_node) == ["n1", "n2", "n3"]
            assert by_node["n1"]["streams"][STREAM]["owner"] is True
            assert by_node["n3"]["streams"][STREAM]["lag"] == 0

            metrics = {n.id: await scrape(n) for n in cluster.nodes}
            assert metrics["n1"]["octosync_cluster_published_total"] >= last - first2
            assert metrics["n1"]["octosync_cluster_claims_won_total"] == 1
            for other in ("n2", "n3"):
                assert metrics[other]["octosync_cluster_applied_total"] >= last - first2
                assert metrics[other]["octosync_cluster_gaps_total"] == 0
                assert metrics[other]["octosync_cluster_nodes_alive"] == 3

            with pytest.raises(ForbiddenPublish):
                await asyncio.wait_for(rival.publish(STREAM, Counter().ctx), 10)

            # A subscriber's write on node 3 reaches the producer on node 1, and its effect
            # comes back to both subscribers.
            await c3._subscriptions[0].write("n", 1_000_000)
            await until(lambda: int(counter.cell.get()) == 1_000_000, "the write on node 1")
            await until(
                lambda: on2[-1:] == [1_000_000] and on3[-1:] == [1_000_000],
                "the written value on nodes 2 and 3",
            )
            assert not pub.closed
            assert pub.failed is None


async def test_writers_on_another_node_are_answered_by_the_producer(cluster: Cluster) -> None:
    """Two writers on node 2 ask the producer on node 1: a write it allows is answered True, one
    it refuses raises its refusal, an effect it lets them trigger runs; it tells them apart."""
    n1, n2, _ = cluster.nodes
    ctx = Context()
    board = ctx.cell("open", type_tag="string", name="board")
    score = ctx.cell(0, type_tag="i64", name="score")
    rings: list[str] = []
    bell = ctx.effect(lambda: rings.append(board.get()))
    rings.clear()  # the effect's first run, when it was made
    asked: list[Writer] = []

    def permissions_for(writer: Writer) -> PeerPermissions:
        asked.append(writer)
        perms = PeerPermissions(write=[score.id])
        perms.grant("trigger_effect", bell.id)
        return perms

    async with connect(n1.url) as p, connect(n2.url) as a, connect(n2.url) as b:
        await p.publish(STREAM, ctx, permissions_for=permissions_for)
        sub_a, sub_b = await a.subscribe(STREAM), await b.subscribe(STREAM)
        for sub in (sub_a, sub_b):
            await asyncio.wait_for(sub.wait_for(lambda s: "score" in s.by_name), 20)
        assert await asyncio.wait_for(sub_a.write("score", 5), 10) is True
        assert score.get() == 5
        with pytest.raises(Forbidden, match=f"node {board.id}"):
            await asyncio.wait_for(sub_b.write("board", "won"), 10)
        assert board.get() == "open"
        assert await asyncio.wait_for(sub_b.trigger(bell.id), 10) is True
        assert rings == ["open"]
        assert len({w.peer for w in asked}) == 2  # node 1 tells node 2's writers apart
        await asyncio.wait_for(sub_b.wait_for(lambda s: s.by_name.get("score") == 5), 10)


@pytest.mark.slow
async def test_a_node_takes_a_streams_frames_only_while_it_has_subscribers(
    cluster: Cluster,
) -> None:
    n1, n2, n3 = cluster.nodes
    counter = Counter()
    async with connect(n1.url) as producer, connect(n2.url) as c2:
        await publish(producer, counter)
        async with watching(c2) as on2:
            await bump_until(counter, lambda: len(on2) >= 50)
            idle = await scrape(n3)
            assert idle["octosync_cluster_received_total"] == 0  # nobody reads it on node 3
            assert idle["octosync_cluster_applied_total"] == 0
            so_far = on2[-1]
            async with connect(n3.url) as c3, watching(c3) as on3:
                await until(lambda: bool(on3), "node 3's first state")
                first = on3[0]
                assert first >= so_far  # the state so far, from the owner's snapshot
                last = await bump_until(counter, lambda: len(on3) >= 30)
                await until(lambda: on3[-1:] == [last], "node 3 to catch up")
                assert on3 == list(range(first, last + 1))
            # Its last subscriber left: node 3 lets the stream go.
            await asyncio.sleep(0.5)
            left = await scrape(n3)
            await bump_until(counter, lambda: False, limit=40)
            await until(lambda: on2[-1:] == [int(counter.cell.get())], "node 2, still following")
            after = await scrape(n3)
            assert after["octosync_cluster_applied_total"] == left["octosync_cluster_applied_total"]
            assert (
                after["octosync_cluster_received_total"]
                < left["octosync_cluster_received_total"] + 5
            )  # at most what was in flight as it unsubscribed


@pytest.mark.slow
async def test_sigkill_of_a_subscriber_node_resumes_on_another_from_a_snapshot(
    cluster: Cluster,
) -> None:
    n1, n2, n3 = cluster.nodes
    counter = Counter()
    async with (
        connect(n1.url) as producer,
        connect(n3.url, fallbacks=[n2.url], backoff=FAST) as moving,
    ):
        await publish(producer, counter)
        async with watching(moving) as seen:
            sub: Subscription = moving._subscriptions[0]
            await bump_until(counter, lambda: len(seen) >= 50)
            before = len(seen)
            n3.kill()
            await bump_until(counter, lambda: sub.reconnects >= 1 and len(seen) >= before + 50)
            assert sub.reconnects >= 1, "the client never reconnected"
            last = int(counter.cell.get())
            await until(lambda: seen[-1:] == [last], "the subscriber to catch up on node 2")
    assert moving.urls[moving._at] == n2.url
    # Before the kill: every delta. After it: a snapshot on node 2, then every delta again;
    # never a value twice or backwards, and the subscriber's mirror never saw a gap.
    assert _contiguous(seen[:before])
    assert all(b > a for a, b in itertools.pairwise(seen))
    jumps = [i for i, (a, b) in enumerate(itertools.pairwise(seen)) if b != a + 1]
    assert len(jumps) <= 1
    assert all(j >= before - 1 for j in jumps)
    assert sub.resyncs == 0


@pytest.mark.slow
async def test_sigkill_of_the_producer_node_releases_the_stream_to_a_new_producer(
    cluster: Cluster,
) -> None:
    n1, n2, n3 = cluster.nodes
    old, new = Counter(), Counter()
    async with (
        connect(n1.url, backoff=Backoff(max_attempts=2)) as producer,
        connect(n3.url) as watcher,
        connect(n2.url, backoff=Backoff(max_attempts=1)) as successor,
    ):
        await publish(producer, old)
        async with watching(watcher) as seen:
            await bump_until(old, lambda: len(seen) >= 20)
            with pytest.raises(ForbiddenPublish):  # n1 is alive and owns it
                await asyncio.wait_for(successor.publish(STREAM, new.ctx), 10)
            n1.kill()
            loop = asyncio.get_running_loop()
            killed = loop.time()
            taken: Publication | None = None
            while taken is None and loop.time() - killed < 20:
                try:
                    taken = await asyncio.wait_for(successor.publish(STREAM, new.ctx), 5)
                except ForbiddenPublish:
                    await asyncio.sleep(0.1)
            assert taken is not None, "no new producer was accepted within 20 s of the kill"
            took = loop.time() - killed
            assert took < 10, f"ownership took {took:.1f}s to be released"
            for _ in range(5):
                new.bump()
            target = int(new.cell.get())
            # The new producer's own state reaches a subscriber on a third node.
            await until(lambda: seen[-1:] == [target], "the new producer's state on node 3")
            status = await cluster_status(cluster.nats_url, listen=1.2)
            assert status["owners"] == {STREAM: "n2"}
            assert sorted(n["node"] for n in status["nodes"]) == ["n2", "n3"]
    # The new producer has left: its node releases the stream at once (the hub's release
    # hook), well within one heartbeat.
    left = asyncio.get_running_loop().time()
    while (await cluster_status(cluster.nats_url, listen=0))["owners"]:
        assert asyncio.get_running_loop().time() - left < 2, "the stream was not released"
        await asyncio.sleep(0.05)


@pytest.mark.slow
async def test_a_nats_restart_under_load_resumes_and_a_release_is_still_seen(
    cluster: Cluster,
) -> None:
    n1, n2, n3 = cluster.nodes
    old, new = Counter(), Counter()
    async with (
        connect(n3.url) as watcher,
        connect(n2.url, backoff=FAST) as successor,
        watching(watcher) as seen,
    ):
        async with connect(n1.url) as producer:
            await publish(producer, old)
            await bump_until(old, lambda: len(seen) >= 20)
            cluster.restart_nats()
            before = old.cell.get()
            # Under load across the restart: the subscriber on node 3 follows again.
            await bump_until(old, lambda: bool(seen) and seen[-1] > before + 20, limit=3000)
            last = int(old.cell.get())
            await until(lambda: seen[-1:] == [last], "node 3 to follow after the restart")
        # The producer left: the stream is released, and node 2 may take it.
        loop = asyncio.get_running_loop()
        left = loop.time()
        taken: Publication | None = None
        while taken is None and loop.time() - left < 20:
            try:
                taken = await asyncio.wait_for(successor.publish(STREAM, new.ctx), 5)
            except ForbiddenPublish:
                await asyncio.sleep(0.1)
        assert taken is not None, "the stream was never released after the NATS restart"
        took = loop.time() - left
        assert took < 8, f"the release took {took:.1f}s to be seen after the NATS restart"
        new.cell.set(424242)
        await until(lambda: seen[-1:] == [424242], "the new producer's value on node 3")
    assert all(b > a for a, b in itertools.pairwise(seen[: seen.index(last) + 1]))


@pytest.mark.slow
async def test_a_node_started_after_the_owner_died_serves_the_snapshot_kept_in_jetstream(
    cluster: Cluster, tmp_path: Path
) -> None:
    n1 = cluster.nodes[0]
    counter = Counter()
    async with connect(n1.url, backoff=Backoff(max_attempts=1)) as producer:
        await publish(producer, counter)
        for _ in range(30):
            counter.bump()
            await asyncio.sleep(0.005)
        # The owner keeps its snapshot on a heartbeat once the epoch moved: wait until the
        # kept one is at the epoch its hub reached (a fixed sleep was too short under load).
        epoch = await hub_epoch(n1, STREAM)
        await _within(kept_reaches(cluster.nats_url, STREAM, epoch), 20)
        n1.kill()
    port = free_port()
    late = await asyncio.to_thread(start_node, cluster.nats_url, "n4", port, tmp_path / "n4")
    cluster.procs.append(late)
    async with connect(f"ws://127.0.0.1:{port}/lazily") as client, watching(client) as seen:
        await until(lambda: bool(seen), "the kept state on the late node")
    assert seen[-1] == 30


async def _late_joiner(node: Node) -> tuple[dict[str, Any], dict[str, Any] | None, int | None]:
    """A raw subscriber's handshake reply, its first frame (None: the socket closed), and the
    close code."""
    async with aiohttp.ClientSession() as http:
        ws = await http.ws_connect(node.url)
        await ws.send_str(handshake(STREAM).decode())
        reply = json.loads((await asyncio.wait_for(ws.receive(), 10)).data)
        first = await asyncio.wait_for(ws.receive(), 10)
        doc = json.loads(first.data) if first.type == aiohttp.WSMsgType.TEXT else None
        if doc is not None and doc.get("type") == "error":
            closed = await asyncio.wait_for(ws.receive(), 10)
            assert closed.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED), closed
        code = ws.close_code
        await ws.close()
        return reply, doc, code


@pytest.mark.slow
async def test_a_node_that_lost_nats_refuses_late_joiners_instead_of_serving_stale_state(
    cluster: Cluster,
) -> None:
    n1, n2, _ = cluster.nodes
    counter = Counter()
    async with (
        connect(n1.url) as producer,
        connect(n2.url) as watcher,
        watching(watcher) as seen,
    ):
        await publish(producer, counter)
        await bump_until(counter, lambda: len(seen) >= 10)
        cluster.kill_nats()
        # the owner goes on alone; node 2 can no longer know how far
        await bump_until(counter, lambda: False, limit=50, every=0.005)
        deadline = asyncio.get_running_loop().time() + 20
        while True:
            _, first, code = await _late_joiner(n2)
            assert first is not None
            if first.get("type") == "error":
                break
            assert first.get("type") == "snapshot", first  # not noticed yet: still current
            assert asyncio.get_running_loop().time() < deadline, "node 2 never noticed"
            await asyncio.sleep(0.1)
        assert first["code"] == "Unavailable", first
        assert "may be stale" in first["message"], first
        assert code == 1013
        cluster.start_nats()
        last = int(counter.cell.get())
        counter.bump()
        await until(lambda: bool(seen) and seen[-1] >= last + 1, "node 2 to follow again", 30)
        _, first, _ = await _late_joiner(n2)
        assert first is not None
        assert first.get("type") == "snapshot", first


# --- WVP streams ------------------------------------------------------------------------------

WARP = 7
Seen = list[wvp.WarpSnapshot | wvp.WarpDiff | OctosyncError]


@contextlib.asynccontextmanager
async def wvp_watching(client: WvpClient, warp: int | None = WARP) -> AsyncIterator[Seen]:
    """Every stream frame (and error) the client receives, in order, in the background;
    subscribed to ``warp`` first (None: a producer's errors only)."""
    if warp is not None:
        await client.subscribe(warp)
    seen: Seen = []

    async def collect() -> None:
        while True:
            try:
                msg = await client.receive()
            except OctosyncError as exc:
                seen.append(exc)
                continue
            except ConnectionError:
                return
            if isinstance(msg, wvp.WarpStream):
                seen.append(msg.frame)

    async with in_background(collect()):
        yield seen


def _diffs_from(start: int, end: int) -> list[wvp.WarpDiff]:
    """The producer's diffs ``start -> end``: each carries its target epoch as its ops."""
    return [wvp.WarpDiff(e, e + 1, [e + 1]) for e in range(start, end)]


def _last_epoch(seen: Seen) -> int | None:
    last = seen[-1] if seen else None
    return last.to_epoch if isinstance(last, wvp.WarpDiff) else None


@pytest.mark.slow
async def test_wvp_diffs_reach_other_nodes_in_order_and_a_second_producer_is_refused(
    cluster: Cluster,
) -> None:
    n1, n2, n3 = cluster.nodes
    async with (
        WvpClient(n1.wvp_url) as producer,
        WvpClient(n2.wvp_url) as s2,
        WvpClient(n3.wvp_url) as s3,
        WvpClient(n2.wvp_url) as rival,
    ):
        await producer.publish_snapshot(WARP, 0, {"n": 0})
        epoch = 0
        for _ in range(5):  # before anyone elsewhere follows: they come with the snapshot
            await producer.publish_diff(WARP, epoch, [epoch + 1])
            epoch += 1
        async with wvp_watching(s2) as on2, wvp_watching(s3) as on3:
            await until(lambda: bool(on2) and bool(on3), "both subscribers' first frames")
            for _ in range(300):
                await producer.publish_diff(WARP, epoch, [epoch + 1])
                epoch += 1
                await asyncio.sleep(0.002)
            last = epoch
            await until(
                lambda: _last_epoch(on2) == last and _last_epoch(on3) == last, "the last diff"
            )
            # The snapshot (with the diffs the owner's hub replays after it), then every diff,
            # once, in order: nothing lost, nothing repeated, no second snapshot.
            expected = [wvp.WarpSnapshot(0, {"n": 0}), *_diffs_from(0, last)]
            assert on2 == expected
            assert on3 == expected

            async with wvp_watching(rival, warp=None) as refusals:
                await rival.publish_snapshot(WARP, 0, {"n": "rival"})
                await until(lambda: bool(refusals), "the rival's refusal")
            assert [type(e) for e in refusals] == [ForbiddenPublish]

            status = await cluster_status(cluster.nats_url, listen=1.2)
            assert status["owners"] == {f"warp:{WARP}": "n1"}
            metrics = {n.id: await scrape(n) for n in cluster.nodes}
            assert metrics["n1"]["octosync_cluster_published_total"] >= last
            for other in ("n2", "n3"):
                assert metrics[other]["octosync_cluster_applied_total"] >= 300
        # Nothing the rival sent reached the subscribers.
        assert all(not isinstance(f, wvp.WarpSnapshot) for f in on2[1:] + on3[1:])


@pytest.mark.slow
async def test_sigkill_of_a_wvp_producers_node_lets_a_new_producer_take_the_stream(
    cluster: Cluster,
) -> None:
    n1, n2, n3 = cluster.nodes
    new_graph = {"n": "new"}
    async with (
        WvpClient(n1.wvp_url) as producer,
        WvpClient(n3.wvp_url) as watcher,
        WvpClient(n2.wvp_url) as successor,
        wvp_watching(watcher) as seen,
        wvp_watching(successor, warp=None) as refusals,
    ):
        await producer.publish_snapshot(WARP, 0, {"n": 0})
        epoch = 0
        while len(seen) < 20 and epoch < 2000:
            await producer.publish_diff(WARP, epoch, [epoch + 1])
            epoch += 1
            await asyncio.sleep(0.01)
        await successor.publish_snapshot(WARP, 100, new_graph)
        await until(lambda: bool(refusals), "the refusal while n1 lives")
        assert isinstance(refusals[0], ForbiddenPublish)

        n1.kill()
        loop = asyncio.get_running_loop()
        killed = loop.time()

        def taken() -> bool:
            return any(isinstance(f, wvp.WarpSnapshot) and f.graph == new_graph for f in seen)

        while not taken() and loop.time() - killed < 20:
            tried = len(refusals)
            await successor.publish_snapshot(WARP, 100, new_graph)
            with contextlib.suppress(AssertionError):
                await until(
                    lambda tried=tried: taken() or len(refusals) > tried, "an answer", timeout=2
                )
            if not taken():
                await asyncio.sleep(0.1)
        assert taken(), "no new producer was accepted within 20 s of the kill"
        took = loop.time() - killed
        assert took < 10, f"ownership took {took:.1f}s to be released"
        for e in range(100, 105):
            await successor.publish_diff(WARP, e, [e + 1])
        await until(lambda: _last_epoch(seen) == 105, "the new producer's diffs on node 3")
        # Node 3 switched to the new producer's snapshot, then took every one of its diffs.
        start = max(i for i, f in enumerate(seen) if isinstance(f, wvp.WarpSnapshot))
        assert seen[start:] == [wvp.WarpSnapshot(100, new_graph), *_diffs_from(100, 105)]
        # Before that: the old producer's snapshot, then its diffs in order.
        before = seen[: seen.index(wvp.WarpSnapshot(100, new_graph))]
        assert before[0] == wvp.WarpSnapshot(0, {"n": 0})
        assert before[1:] == _diffs_from(0, len(before) - 1)
        assert len(before) >= 20
        status = await cluster_status(cluster.nats_url, listen=1.2)
        assert status["owners"] == {f"warp:{WARP}": "n2"}


@pytest.mark.slow
async def test_a_node_started_after_a_wvp_owner_died_serves_its_kept_replay(
    cluster: Cluster, tmp_path: Path
) -> None:
    n1 = cluster.nodes[0]
    async with WvpClient(n1.wvp_url) as producer:
        await producer.publish_snapshot(WARP, 0, {"n": 0})
        for e in range(30):
            await producer.publish_diff(WARP, e, [e + 1])
        await asyncio.sleep(1.5)  # three heartbeats: the owner keeps its replay
        n1.kill()
    port = free_port()
    late = await asyncio.to_thread(start_node, cluster.nats_url, "n4", port, tmp_path / "n4")
    cluster.procs.append(late)
    async with WvpClient(f"ws://127.0.0.1:{port}/wvp") as client, wvp_watching(client) as seen:
        await until(lambda: _last_epoch(seen) == 30, "the kept state on the late node")
    assert seen == [wvp.WarpSnapshot(0, {"n": 0}), *_diffs_from(0, 30)]


@pytest.mark.slow
async def test_a_wvp_resync_request_on_another_node_reaches_the_owners_producer(
    cluster: Cluster,
) -> None:
    n1, n2, _ = cluster.nodes
    async with (
        WvpClient(n1.wvp_url) as producer,
        WvpClient(n2.wvp_url) as viewer,
        wvp_watching(viewer) as seen,
    ):
        await producer.publish_snapshot(WARP, 0, {"n": 0})
        for e in range(3):
            await producer.publish_diff(WARP, e, [e + 1])
        await until(lambda: _last_epoch(seen) == 3, "the diffs on the other node")
        # Two requests at once: the asking node passes one on per interval until the producer
        # snapshots, and the owner's hub hands that one to its producer.
        await viewer.request_resync(WARP, 3, "first")
        await viewer.request_resync(WARP, 3, "second")
        asked = await producer.receive(20)
        assert asked == wvp.ResyncRequest(warp_id=WARP, epoch=3, reason="first")
        await producer.publish_snapshot(WARP, 3, {"n": 3})
        await until(lambda: seen[-1] == wvp.WarpSnapshot(3, {"n": 3}), "the producer's answer")
        await producer.publish_diff(WARP, 3, [4])
        await until(lambda: _last_epoch(seen) == 4, "the diff after the snapshot")
        # Answered: the next request goes through at once, and "second" never did.
        await viewer.request_resync(WARP, 4, "third")
        asked = await producer.receive(20)
        assert asked == wvp.ResyncRequest(warp_id=WARP, epoch=4, reason="third")
    # The only snapshots the viewer got: the first, and the producer's answer (the node that
    # asked never answered from its own copy).
    assert [f for f in seen if isinstance(f, wvp.WarpSnapshot)] == [
        wvp.WarpSnapshot(0, {"n": 0}),
        wvp.WarpSnapshot(3, {"n": 3}),
    ]
