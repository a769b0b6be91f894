"""Shared documents held by interest (``[cluster] hold = "interest"``, the default), with real
processes on loopback: a NATS server (JetStream, with its monitoring port for ``/connz``), three
``octosync serve --cluster`` nodes, and octosync's Python client.

A node holds the documents its clients use: it loads one from JetStream on its first client,
follows only that document's subject, and lets it go when it has been idle. Every wait is
bounded; every process is killed in the fixture's finalizer.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from octosync.client.shared import SharedDocument
from octosync.cluster.holding import token
from octosync.links import nats_server
from octosync.links.cluster_cli import cluster_status
from octosync.wire import cluster_planes as wire
from tests.e2e.helpers import free_port
from tests.e2e.test_cluster_maps import Cluster, Node, scrape

TIMEOUT = 60.0
WRITTEN = 400
"""Documents written through node A (the benchmark writes many more)."""
OPENED = 10
STREAM = "octosync_octosync_documents"
BUCKET = "octosync_octosync_document_snapshots"
KEYS = "document_snapshot_interval = 0.5\ndocument_load_timeout = 20.0"


@contextlib.contextmanager
def monitored_cluster(root: Path, keys: str) -> Iterator[tuple[Cluster, int]]:
    """NATS with its monitoring port, and nodes n1 and n2 with ``[cluster]`` lines ``keys``
    (a test starts n3)."""
    port, monitor = free_port(), free_port()
    proc = nats_server.start(root / "nats", port, monitor=monitor)
    c = Cluster(f"nats://127.0.0.1:{port}", root, proc)
    try:
        c.start("n1", cluster_keys=keys)
        c.start("n2", cluster_keys=keys)
        yield c, monitor
    finally:
        c.stop()


@pytest.fixture
def monitored(tmp_path: Path) -> Iterator[tuple[Cluster, int]]:
    with monitored_cluster(tmp_path, KEYS) as both:
        yield both


def name(i: int) -> str:
    return f"room/{i}"  # a '/' that no subject token may hold as it is


async def write_documents(node: Node, names: list[str], value: int) -> None:
    """Each document gets its counter ``n`` raised by ``value`` through ``node`` (20 at once)."""
    gate = asyncio.Semaphore(20)

    async def one(doc_name: str) -> None:
        async with gate, SharedDocument(node.lazily, doc_name) as doc:
            await doc.synced(TIMEOUT)
            doc.counter("n").add(value)
            await doc.synced(TIMEOUT)

    await asyncio.wait_for(asyncio.gather(*(one(n) for n in names)), TIMEOUT)


async def connz(monitor: int) -> list[dict[str, object]]:
    url = f"http://127.0.0.1:{monitor}/connz?subs=1&limit=1024"
    async with aiohttp.ClientSession() as http, http.get(url) as response:
        body = await response.json()
    return list(body["connections"])


async def connection_of(monitor: int, node: Node) -> dict[str, object]:
    """NATS's own record of the node's cluster connection (named ``octosync-<node>``)."""
    for conn in await connz(monitor):
        if conn.get("name") == f"octosync-{node.id}":
            return conn
    raise AssertionError(f"no NATS connection named octosync-{node.id}")


async def held(node: Node) -> float:
    return (await scrape(node))["octosync_cluster_documents_held"]


async def until_metric(node: Node, metric: str, want: float) -> None:
    for _ in range(int(TIMEOUT / 0.1)):
        if (await scrape(node)).get(metric) == want:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{metric} on {node.id} never became {want}")


@pytest.mark.slow
async def test_a_node_holds_and_receives_only_the_documents_its_clients_use(
    monitored: tuple[Cluster, int],
) -> None:
    """Documents written through A; a client on C opens 10: C holds those 10, its consumers
    filter exactly their subjects, it receives from NATS fewer messages than the other
    documents' edits, and A's edits of the 10 reach C's client live."""
    cluster, monitor = monitored
    a, b = cluster.nodes["n1"], cluster.nodes["n2"]
    c = cluster.start("n3", cluster_keys=KEYS)
    names = [name(i) for i in range(WRITTEN)]
    await write_documents(a, names, 1)
    assert await held(b) == 0  # nobody uses them on B: nothing loaded there
    opened = names[:: WRITTEN // OPENED][:OPENED]
    readers = [SharedDocument(c.lazily, n) for n in opened]
    try:
        for doc in readers:
            await doc.start()
        for doc in readers:
            await doc.synced(TIMEOUT)
            assert doc.counter("n").value == 1  # loaded from JetStream: A's edit is there
        assert await held(c) == OPENED
        metrics = await scrape(c)
        assert metrics["octosync_cluster_documents_loads_total"] == OPENED
        status = await cluster_status(cluster.url, listen=2.5)  # `octosync cluster status`
        rows = {row["node"]: row for row in status["nodes"]}
        assert rows["n3"]["documents_held"] == OPENED
        assert rows["n3"]["documents"] == sorted(opened)
        assert rows["n2"]["documents_held"] == 0

        # C's consumers of the documents' stream filter exactly the opened documents' subjects
        mine = await connection_of(monitor, c)
        inboxes = set(mine.get("subscriptions_list") or [])  # type: ignore[call-overload]
        nc = await nats_server.connect(cluster.url)
        try:
            js = nc.jetstream()
            filters = set()
            offset = 0
            while page := await js.consumers_info(STREAM, offset=offset):  # A holds 400
                offset += len(page)
                for info in page:
                    if info.config.deliver_subject in inboxes:
                        filters.add(info.config.filter_subject)
        finally:
            await nc.close()
        assert filters == {f"octosync.octosync.planes.{token(n)}" for n in opened}

        # A edits the other documents and the opened ones; C's connection takes the latter only
        before = int(mine["out_msgs"])  # type: ignore[call-overload]
        others = [n for n in names if n not in opened][:200]
        await write_documents(a, [*others, *opened], 2)
        for doc in readers:  # live, through C
            await doc.wait_until(lambda d=doc: d.counter("n").value == 3, TIMEOUT)
        taken = int((await connection_of(monitor, c))["out_msgs"]) - before  # type: ignore[call-overload]
        assert taken < len(others) // 2, f"C took {taken} messages for {len(others)} others"
        assert await held(c) == OPENED
    finally:
        for doc in readers:
            await doc.close()


@pytest.mark.slow
async def test_clients_of_a_killed_node_move_on_and_every_acknowledged_edit_is_loaded(
    monitored: tuple[Cluster, int],
) -> None:
    """Writers on C, given B as a fallback, write five documents; what C acknowledged is read
    on A once C is SIGKILLed (A never held them: JetStream alone), then the writers go on
    through B, which loads the documents, and every click is counted exactly once."""
    cluster, _ = monitored
    a, b = cluster.nodes["n1"], cluster.nodes["n2"]
    c = cluster.start("n3", cluster_keys=KEYS)
    names = [f"kill/{i}" for i in range(5)]
    clicks = 60
    writers = [SharedDocument(c.lazily, n, fallbacks=[b.lazily]) for n in names]
    try:
        for doc in writers:
            await doc.start()
        for k in range(clicks):
            for doc in writers:
                doc.counter("n").add(1)
            if k == clicks // 2:
                for doc in writers:
                    await doc.synced(TIMEOUT)  # acknowledged by C: stored in JetStream
                c.kill()  # at once, with the rest still to write
            await asyncio.sleep(0.005)
        for n in names:  # what C acknowledged, from JetStream alone
            async with SharedDocument(a.lazily, n) as late:
                await late.synced(TIMEOUT)
                assert late.counter("n").value >= clicks // 2 + 1
        for doc in writers:
            await doc.synced(TIMEOUT)
            assert doc.url == b.lazily
            assert doc.reconnects >= 1
        for n in names:
            async with SharedDocument(b.lazily, n) as reader:
                await reader.synced(TIMEOUT)
                await reader.wait_until(lambda r=reader: r.counter("n").value == clicks, TIMEOUT)
        assert await held(b) >= len(names)
    finally:
        for doc in writers:
            await doc.close()


@pytest.mark.slow
async def test_an_idle_document_is_let_go_and_loaded_again_with_nothing_lost(
    tmp_path: Path,
) -> None:
    """With a one-second idle time: a document written and closed on A is let go (its
    snapshot written to the bucket), then opened again on A, loaded from the snapshot and
    the subject after it, with every edit."""
    port = free_port()
    cluster = Cluster(f"nats://127.0.0.1:{port}", tmp_path, nats_server.start(tmp_path / "n", port))
    try:
        a = cluster.start("n1", cluster_keys=KEYS + "\ndocument_idle = 1.0")
        async with SharedDocument(a.lazily, "idle") as doc:
            for _ in range(25):
                doc.counter("n").add(1)
            doc.map("todo").set("milk", True)
            await doc.synced(TIMEOUT)
        await until_metric(a, "octosync_cluster_documents_held", 0)
        metrics = await scrape(a)
        assert metrics["octosync_cluster_documents_releases_total"] == 1
        nc = await nats_server.connect(cluster.url)
        try:
            entry = await (await nc.jetstream().key_value(BUCKET)).get(token("idle"))
            snapshot = wire.decode(entry.value or b"")
            assert isinstance(snapshot, wire.DocSnapshot)
            assert snapshot.stream == "idle"
            assert snapshot.ops  # the compacted document
        finally:
            await nc.close()
        async with SharedDocument(a.lazily, "idle") as again:
            await again.synced(TIMEOUT)
            assert again.counter("n").value == 25
            assert again.map("todo").value == {"milk": True}
            again.counter("n").add(1)
            await again.synced(TIMEOUT)
        metrics = await scrape(a)
        assert metrics["octosync_cluster_documents_loads_total"] == 2
        assert metrics["octosync_cluster_documents_held"] == 1
    finally:
        cluster.stop()


@pytest.mark.slow
async def test_documents_journaled_while_every_node_held_them_are_loaded_by_interest(
    tmp_path: Path,
) -> None:
    """A node that held every document (``hold = "all"``, its journal the record) starts again
    holding by interest: it publishes its journal's documents once, and another node loads
    them from JetStream."""
    port = free_port()
    cluster = Cluster(f"nats://127.0.0.1:{port}", tmp_path, nats_server.start(tmp_path / "n", port))
    try:
        a = cluster.start("n1", cluster_keys='hold = "all"')
        async with SharedDocument(a.lazily, "old") as doc:
            doc.counter("n").add(7)
            await doc.synced(TIMEOUT)
        a.kill()
        a = cluster.start("n1", cluster_keys=KEYS)  # the same data folder
        b = cluster.start("n2", cluster_keys=KEYS)
        async with SharedDocument(b.lazily, "old") as doc:
            await doc.synced(TIMEOUT)
            assert doc.counter("n").value == 7
        assert (a.data / "documents-in-jetstream").exists()
    finally:
        cluster.stop()


@pytest.mark.slow
async def test_held_documents_are_followed_again_after_nats_restarts(
    monitored: tuple[Cluster, int],
) -> None:
    """NATS SIGKILLed and started again while a node holds a document: another node's edits
    still reach the holder's reader live (its consumer is there again, or made again)."""
    cluster, _ = monitored
    a, b = cluster.nodes["n1"], cluster.nodes["n2"]
    async with SharedDocument(a.lazily, "live") as reader, SharedDocument(b.lazily, "live") as w:
        await reader.synced(TIMEOUT)
        w.counter("n").add(1)
        await w.synced(TIMEOUT)
        await reader.wait_until(lambda: reader.counter("n").value == 1, TIMEOUT)
        await asyncio.to_thread(cluster.restart_nats)
        w.counter("n").add(1)
        await w.synced(TIMEOUT)
        await reader.wait_until(lambda: reader.counter("n").value == 2, TIMEOUT)
