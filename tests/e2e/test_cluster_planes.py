"""Shared documents across a cluster, with real processes on loopback: a NATS server
(JetStream), ``octosync serve --cluster`` nodes, and octosync's Python client
(``SharedDocument``) writing through different nodes at once.

Every wait is bounded, every process is killed in the fixture's finalizer, ports are free ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from octosync.client.shared import SharedDocument
from octosync.ipc.messages import CrdtOp
from octosync.links import nats_server
from octosync.links.cluster_cli import start_node
from tests.browser.support import JS_CLIENT, node_command
from tests.e2e.test_cluster_maps import Cluster, Node, cluster, scrape

__all__ = ["cluster"]  # the fixture: NATS and nodes n1, n2

DOC = "clicks"
STREAM = "octosync_octosync_planes"
TIMEOUT = 60.0


def restart(c: Cluster, node_id: str) -> Node:
    """Start ``node_id`` again on its port and data directory (its clients reconnect there)."""
    old = c.nodes[node_id]
    config = c.root / "octosync.toml"
    proc = start_node(c.url, node_id, old.port, old.data, extra=["--config", str(config)])
    node = c.nodes[node_id] = Node(node_id, old.port, old.data, proc)
    return node


@contextlib.asynccontextmanager
async def reader(node: Node) -> AsyncIterator[SharedDocument]:
    """A fresh replica joined on ``node``: it holds what that node holds once joined."""
    async with SharedDocument(node.lazily, DOC) as doc:
        await doc.synced(TIMEOUT)
        yield doc


def hold_all(c: Cluster, *nodes: str) -> None:
    """Start ``nodes`` again holding every document (``[cluster] hold = "all"``): each node's
    journal is its record, JetStream's op stream a carrier that anti-entropy backs up."""
    for node_id in nodes:
        c.nodes[node_id].kill()
    for node_id in nodes:
        c.start(node_id, cluster_keys='hold = "all"')


def state(doc: SharedDocument) -> tuple[CrdtOp, ...]:
    return doc.cells.state.replica.ops()


async def total_on(node: Node, want: int) -> tuple[CrdtOp, ...]:
    """The whole document as ``node`` serves it, once its counter reached ``want``."""
    async with reader(node) as doc:
        await doc.wait_until(lambda: doc.counter("n").value >= want, TIMEOUT)
        assert doc.counter("n").value == want
        return state(doc)


@pytest.mark.slow
async def test_writers_on_three_nodes_with_one_killed_midway_count_every_click(
    cluster: Cluster,
) -> None:
    """Two writers per node add 1 at a time, all at once; node 2 is SIGKILLed while they write
    (its writers go on offline) and started again: every node and every writer ends with the
    same document, and the counter is exactly the number of clicks."""
    cluster.start("n3")
    nodes = [cluster.nodes[n] for n in ("n1", "n2", "n3")]
    writers = [SharedDocument(node.lazily, DOC) for node in nodes for _ in range(2)]
    clicks = 150
    done = [0] * len(writers)
    killed, restarted = asyncio.Event(), asyncio.Event()

    async def click(i: int, doc: SharedDocument) -> None:
        for k in range(clicks):
            doc.counter("n").add(1)
            doc.register(f"last{i % 2}").set(k)  # two writers race on each register
            done[i] = k + 1
            if k == clicks // 3 and i >= 2:  # the others keep writing while node 2 is down
                await killed.wait()
            if k == 2 * clicks // 3:
                await restarted.wait()
            await asyncio.sleep(0.003)

    async def chaos() -> None:
        while min(done) < clicks // 3:
            await asyncio.sleep(0.01)
        nodes[1].kill()  # kill -9, writes in flight
        killed.set()
        while min(done) < 2 * clicks // 3:
            await asyncio.sleep(0.01)
        await asyncio.to_thread(restart, cluster, "n2")
        restarted.set()

    for doc in writers:
        await doc.start()
    try:
        await asyncio.wait_for(
            asyncio.gather(chaos(), *(click(i, d) for i, d in enumerate(writers))), TIMEOUT
        )
        for doc in writers:
            await doc.synced(TIMEOUT)
        want = clicks * len(writers)
        for doc in writers:
            await doc.wait_until(lambda d=doc: d.counter("n").value == want, TIMEOUT)
        assert writers[2].reconnects + writers[3].reconnects >= 2  # node 2's writers came back
        seen = [await total_on(cluster.nodes[n], want) for n in ("n1", "n2", "n3")]
        assert seen[0] == seen[1] == seen[2]
        for doc in writers:  # the writers' replicas are the nodes' too
            await doc.wait_until(lambda d=doc: state(d) == seen[0], TIMEOUT)
        assert {writers[0].register("last0").value, writers[0].register("last1").value} == {
            clicks - 1
        }
    finally:
        for doc in writers:
            await doc.close()


@pytest.mark.slow
async def test_an_acknowledged_edit_outlives_sigkill_of_its_node(cluster: Cluster) -> None:
    """An acknowledgement in a cluster means journaled on the node and stored in JetStream:
    the node may die at once, and a node started afterwards still has the edit."""
    n1, n2 = cluster.nodes["n1"], cluster.nodes["n2"]
    async with SharedDocument(n1.lazily, DOC) as writer:
        for _ in range(50):
            writer.counter("n").add(1)
        writer.map("todo").set("milk", True)
        await writer.synced(TIMEOUT)
        n1.kill()  # at once: the only copy off node 1 is what JetStream stored
    await total_on(n2, 50)
    n3 = cluster.start("n3")  # never saw the writer: JetStream alone
    async with reader(n3) as late:
        assert late.counter("n").value == 50  # caught up before its port opened
        assert late.map("todo").value == {"milk": True}


@pytest.mark.slow
async def test_anti_entropy_repairs_what_the_op_stream_lost(cluster: Cluster) -> None:
    hold_all(cluster, "n1", "n2")
    n1, n2 = cluster.nodes["n1"], cluster.nodes["n2"]
    n2.kill()
    async with SharedDocument(n1.lazily, DOC) as writer:
        for _ in range(30):
            writer.counter("n").add(1)
        await writer.synced(TIMEOUT)
    # The stream loses them (as limits or an operator's purge would): only node 1 has them.
    nc = await nats_server.connect(cluster.url)
    try:
        await nc.jetstream().purge_stream(STREAM)
    finally:
        await nc.close()
    n2 = restart(cluster, "n2")
    await total_on(n2, 30)  # a sync round each second (the fixture's configuration)
    metrics = await scrape(n2)
    assert metrics["octosync_cluster_planes_repaired_total"] >= 1
    assert metrics["octosync_cluster_planes_merged_total"] == 0


@pytest.mark.slow
async def test_edits_past_the_streams_age_limit_reach_a_returning_node(cluster: Cluster) -> None:
    """The op stream keeps messages ``map_log_max_age`` seconds: a node away longer than that
    finds them gone, says how many, and gets the edits from the other node instead."""
    cluster.nodes["n2"].kill()
    cluster.nodes["n1"].kill()
    n1 = cluster.start("n1", cluster_keys='map_log_max_age = 1.0\nhold = "all"')
    nc = await nats_server.connect(cluster.url)
    try:
        js = nc.jetstream()
        info = await js.stream_info(STREAM)
        assert info.config.max_age == 1.0  # the existing stream took the node's limit
        async with SharedDocument(n1.lazily, DOC) as writer:
            for _ in range(30):
                writer.counter("n").add(1)
            await writer.synced(TIMEOUT)
        published = (await js.stream_info(STREAM)).state.last_seq
        assert published >= 1
        for _ in range(200):  # NATS expires them within a few seconds
            if (await js.stream_info(STREAM)).state.messages == 0:
                break
            await asyncio.sleep(0.1)
        assert (await js.stream_info(STREAM)).state.messages == 0
    finally:
        await nc.close()
    n2 = restart(cluster, "n2")
    await total_on(n2, 30)  # a sync round each second (the fixture's configuration)
    metrics = await scrape(n2)
    assert metrics["octosync_cluster_planes_unreplayed_total"] == published
    assert metrics["octosync_cluster_planes_merged_total"] == 0
    assert metrics["octosync_cluster_planes_repaired_total"] >= 1


@pytest.mark.slow
async def test_a_js_writer_and_a_python_writer_on_two_nodes_end_identical(
    cluster: Cluster, tmp_path: Path
) -> None:
    """octosync.js under Node on node 2 and the Python client on node 1 click one counter at
    once and each set a map field: both end with the same entries, byte for byte."""
    from tests.e2e.test_lazily_py_peer import JS_WRITER, entries_of

    n1, n2 = cluster.nodes["n1"], cluster.nodes["n2"]
    clicks, entries = 40, 4  # two counter entries, two map fields
    script = tmp_path / "writer.mjs"
    script.write_text(
        JS_WRITER.format(
            module=json.dumps((JS_CLIENT / "octosync.js").as_uri()),
            url=json.dumps(f"ws://127.0.0.1:{n2.port}"),
            stream=json.dumps(DOC),
            clicks=clicks,
            total=2 * clicks,
            entries=entries,
        )
    )
    js = await asyncio.create_subprocess_exec(
        *node_command(), str(script), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    async with SharedDocument(n1.lazily, DOC) as doc:
        for _ in range(clicks):
            doc.counter("clicks").add(1)
            await asyncio.sleep(0.001)
        doc.map("todo").set("py", True)
        await doc.synced(TIMEOUT)
        out, err = await asyncio.wait_for(js.communicate(), 90)
        assert js.returncode == 0, err.decode()[-3000:]
        await doc.wait_until(lambda: len(doc.cells.state.replica) == entries, TIMEOUT)
        assert doc.counter("clicks").value == 2 * clicks
        ours = entries_of(doc)
    theirs = json.loads(out.decode().strip().splitlines()[-1])
    assert theirs["counter"] == 2 * clicks
    assert sorted(theirs["entries"]) == ours


FAILOVER_WRITER = """
import {{ connect }} from {module};
const client = connect({url}, {{ fallbacks: [{fallback}] }});
const doc = client.openDocument({stream});
await doc.synced();
for (let i = 0; i < {clicks}; i += 1) {{
  doc.counter("n").add(1);
  await new Promise((r) => setTimeout(r, 5));
}}
await doc.synced();
while (doc.counter("n").value !== {total}) await new Promise((r) => doc.on("change", r));
console.log(JSON.stringify({{ counter: doc.counter("n").value, reconnects: doc.reconnects }}));
client.close();
process.exit(0);
"""


@pytest.mark.slow
async def test_writers_given_the_nodes_go_on_with_the_next_when_theirs_is_killed(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A Python and a JavaScript writer, each given both nodes, write through node 1; node 1 is
    SIGKILLed while they write and stays down: both move on to node 2 with their pending
    edits, and node 2 counts every click exactly once."""
    n1, n2 = cluster.nodes["n1"], cluster.nodes["n2"]
    clicks = 200
    script = tmp_path / "failover.mjs"
    script.write_text(
        FAILOVER_WRITER.format(
            module=json.dumps((JS_CLIENT / "octosync.js").as_uri()),
            url=json.dumps(f"ws://127.0.0.1:{n1.port}"),
            fallback=json.dumps(f"ws://127.0.0.1:{n2.port}"),
            stream=json.dumps(DOC),
            clicks=clicks,
            total=2 * clicks,
        )
    )
    js = await asyncio.create_subprocess_exec(
        *node_command(), str(script), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )

    async def kill_midway(watcher: SharedDocument) -> None:
        await watcher.wait_until(lambda: watcher.counter("n").value >= clicks // 2, TIMEOUT)
        n1.kill()

    async with (
        SharedDocument(n1.lazily, DOC, fallbacks=[n2.lazily]) as writer,
        reader(n2) as watcher,
    ):
        killer = asyncio.create_task(kill_midway(watcher))
        for _ in range(clicks):
            writer.counter("n").add(1)
            await asyncio.sleep(0.005)
        await asyncio.wait_for(killer, TIMEOUT)
        assert n1.proc.poll() is not None
        await writer.synced(TIMEOUT)
        out, err = await asyncio.wait_for(js.communicate(), 90)
        assert js.returncode == 0, err.decode()[-3000:]
        theirs = json.loads(out.decode().strip().splitlines()[-1])
        await watcher.wait_until(lambda: watcher.counter("n").value == 2 * clicks, TIMEOUT)
        assert writer.url == n2.lazily
        assert writer.reconnects >= 1
        assert theirs["counter"] == 2 * clicks
        assert theirs["reconnects"] >= 1
    await total_on(n2, 2 * clicks)


@pytest.mark.slow
async def test_an_edit_is_acknowledged_only_once_jetstream_stored_it(cluster: Cluster) -> None:
    """With NATS gone the node journals the edit but neither merges nor acknowledges it: it
    stays pending on its writer, and is counted once NATS is back."""
    n1, n2 = cluster.nodes["n1"], cluster.nodes["n2"]
    async with SharedDocument(n1.lazily, DOC) as writer, reader(n1) as local:
        await writer.synced(TIMEOUT)
        cluster.nats.send_signal(signal.SIGKILL)
        cluster.nats.wait(timeout=10)
        for _ in range(5):
            writer.counter("n").add(1)
        await asyncio.sleep(2.0)
        assert writer.pending, "acknowledged while no JetStream was there to store it"
        assert local.counter("n").value == 0  # not fanned out either
        port = int(cluster.url.rsplit(":", 1)[1])
        cluster.nats = await asyncio.to_thread(nats_server.start, cluster.root / "nats", port)
        await writer.synced(TIMEOUT)
        await local.wait_until(lambda: local.counter("n").value == 5, TIMEOUT)
    await total_on(n2, 5)
