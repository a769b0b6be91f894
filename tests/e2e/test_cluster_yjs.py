"""``/yjs`` documents across a cluster, with real processes on loopback: a NATS server
(JetStream), ``octosync serve --cluster`` nodes, y-websocket's and Hocuspocus's providers
under Node, and pycrdt peers of the Hocuspocus protocol.

Every wait is bounded, every process is killed in the fixture's finalizer, ports are free ones.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pycrdt import Doc, Text

from octosync.links import nats_server
from octosync.yjs import messages as m
from tests.e2e.test_cluster_maps import Cluster, Node, cluster, scrape
from tests.e2e.test_cluster_planes import restart
from tests.e2e.test_yjs_providers import edit, peers
from tests.e2e.yjs_client import next_body, open_hocuspocus, read_document, view

__all__ = ["cluster", "peers"]  # the fixtures: NATS and nodes n1, n2; the Node providers

NOTES = m.address_prefix("notes")
STREAM = "octosync_octosync_yjs"
TIMEOUT = 60.0


def ws(node: Node) -> str:
    return f"ws://127.0.0.1:{node.port}"


async def document_on(node: Node, name: str = "notes") -> Doc[Any]:
    async with aiohttp.ClientSession() as http:
        return await read_document(http, ws(node), name)


async def text_on(node: Node, want: int) -> str:
    """Node's Y.Text ``text`` once it holds ``want`` pieces ``<i>`` (bounded)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT
    while True:
        text = str((await document_on(node)).get("text", type=Text))
        if text.count("<") >= want or loop.time() > deadline:
            return text
        await asyncio.sleep(0.2)


@pytest.mark.slow
@pytest.mark.peer
async def test_y_websocket_on_one_node_and_hocuspocus_on_another_edit_one_text(
    cluster: Cluster, peers: Path
) -> None:
    """Each provider writes through its own node, interleaved with the other: both end with
    one document, which each node serves to a pycrdt reader."""
    n1, n2 = cluster.nodes["n1"], cluster.nodes["n2"]
    result = await edit(peers, "y-websocket", "hocuspocus", ws(n1), "notes", b_url=ws(n2))
    assert result["a"] == result["b"]
    assert sorted(result["a"]["text"].rstrip(";").split(";")) == sorted(
        f"{who}{i}" for who in "ab" for i in range(20)
    )
    assert view(await document_on(n1)) == view(await document_on(n2)) == result["a"]


async def type_until_killed(node: Node, sent: int, kill_after: int) -> int:
    """Pipeline ``sent`` edits through ``node``'s Hocuspocus protocol, SIGKILL the node once
    ``kill_after`` are confirmed; returns how many were confirmed."""
    doc: Doc[Any] = Doc()
    text = doc.get("text", type=Text)
    confirmed = 0
    async with aiohttp.ClientSession() as http:
        sock = await http.ws_connect(f"{ws(node)}/yjs")
        assert await open_hocuspocus(sock, "notes") == m.authenticated(False)
        for i in range(sent):
            before = doc.get_state()
            text.insert(len(text), f"<{i}>")
            await sock.send_bytes(NOTES + m.sync_update(doc.get_update(before)))
        with contextlib.suppress(AssertionError, TimeoutError, aiohttp.ClientError):
            while True:
                if await next_body(sock, NOTES) == m.sync_status(True):
                    confirmed += 1
                    if confirmed == kill_after:
                        node.kill()
    return confirmed


@pytest.mark.slow
async def test_every_confirmed_update_is_on_the_survivor_after_sigkill(cluster: Cluster) -> None:
    """A confirmation in a cluster means journaled on the node and stored in JetStream: the
    node is SIGKILLed with updates in flight, and the other node holds every confirmed one;
    a node started afterwards, that never saw the writer, gets the document before its port
    opens."""
    n1, n2 = cluster.nodes["n1"], cluster.nodes["n2"]
    confirmed = await type_until_killed(n1, 300, 60)
    assert confirmed >= 60
    text = await text_on(n2, confirmed)
    missing = [i for i in range(confirmed) if f"<{i}>" not in text]
    assert not missing, (missing[:10], confirmed)
    n3 = await asyncio.to_thread(cluster.start, "n3")
    late = str((await document_on(n3)).get("text", type=Text))  # read at once: caught up
    assert all(f"<{i}>" in late for i in range(confirmed))


async def write(node: Node, pieces: range, pad: int = 0) -> None:
    """Each piece ``<i>`` (then ``pad`` dots) an update of its own on ``node``, every one
    confirmed."""
    doc = await document_on(node)
    text = doc.get("text", type=Text)
    async with aiohttp.ClientSession() as http:
        sock = await http.ws_connect(f"{ws(node)}/yjs")
        assert await open_hocuspocus(sock, "notes") == m.authenticated(False)
        for i in pieces:
            before = doc.get_state()
            text.insert(len(text), f"<{i}>" + "." * pad)
            await sock.send_bytes(NOTES + m.sync_update(doc.get_update(before)))
        confirmed = 0
        while confirmed < len(pieces):
            if await next_body(sock, NOTES) == m.sync_status(True):
                confirmed += 1
        await sock.close()


@pytest.mark.slow
async def test_a_node_down_and_back_catches_up_before_its_port_opens(cluster: Cluster) -> None:
    n1, n2 = cluster.nodes["n1"], cluster.nodes["n2"]
    await write(n1, range(10))
    await text_on(n2, 10)
    n2.kill()
    await write(n1, range(10, 40))  # node 2 is away for these
    n2 = await asyncio.to_thread(restart, cluster, "n2")
    back = str((await document_on(n2)).get("text", type=Text))  # at once: caught up first
    assert all(f"<{i}>" in back for i in range(40)), back
    metrics = await scrape(n2)
    assert metrics["octosync_cluster_yjs_applied_total"] >= 1  # from the stream, not repair


@pytest.mark.slow
async def test_anti_entropy_repairs_what_the_op_stream_lost(cluster: Cluster) -> None:
    """The stream loses updates node 2 never read (as its age limit or an operator's purge
    would): node 2 gets them from node 1 by comparing state vectors, the diff (past one
    message's bound: 100 KB pieces) in parts."""
    n1, n2 = cluster.nodes["n1"], cluster.nodes["n2"]
    n2.kill()
    await write(n1, range(26))
    await write(n1, range(26, 30), pad=100_000)
    nc = await nats_server.connect(cluster.url)
    try:
        await nc.jetstream().purge_stream(STREAM)
    finally:
        await nc.close()
    n2 = await asyncio.to_thread(restart, cluster, "n2")
    text = await text_on(n2, 30)  # a round each second (the cluster's config)
    assert all(f"<{i}>" in text for i in range(30)), text
    metrics = await scrape(n2)
    assert metrics["octosync_cluster_yjs_repaired_total"] >= 1
    assert metrics["octosync_cluster_yjs_applied_total"] == 0  # none came by the stream
