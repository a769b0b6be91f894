"""TopGun's own cluster client across two octosync nodes, one of them killed with SIGKILL.

Real processes on loopback: a NATS server (JetStream), two ``octosync serve --cluster`` nodes
with tokens and ``[cluster] map_acks = "replicated"``, and TopGun's client under Node.js
given both nodes as seeds (smart routing, its default). It writes without pause; a node is
killed; the client must go on writing to the survivor, and every write acknowledged must be on
the survivor: each write a node acked on the socket it came in on, and each write the client
itself counts as synced. (TopGun's client marks every op up to an ack's ``lastId`` synced,
whichever node sent the ack; the one-node-per-client partition map of ``topgun.partitions``
is what keeps the second true.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from octosync.links import nats_server
from octosync.server.auth import issue_token
from tests.e2e.helpers import free_port
from tests.e2e.test_cluster_maps import SECRET, Cluster, Node, peer, wait_for_nodes
from tests.e2e.test_topgun_interop import Client, start

pytestmark = [pytest.mark.peer, pytest.mark.slow]

LIMIT = 60.0
"""Seconds any one wait of the test may take."""


@pytest.fixture(params=["all", "interest"])
def two_nodes(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """Two nodes holding every map, or each the maps its clients use (the survivor loads the
    client's map from JetStream when the client moves to it)."""
    port = free_port()
    c = Cluster(f"nats://127.0.0.1:{port}", tmp_path, nats_server.start(tmp_path / "nats", port))
    # every ack waits until the cluster stored the batch
    held = f'map_acks = "replicated"\nmap_hold = "{request.param}"'
    try:
        c.start("n1", tokens=True, cluster_keys=held)
        c.start("n2", tokens=True, cluster_keys=held)
        yield c
    finally:
        c.stop()


async def cluster_client(peer_exe: tuple[str, Path], seeds: list[str], token: str) -> Client:
    """TopGun's client given ``seeds`` (its ``--url`` is not used in cluster mode)."""
    args = ("--seeds", ",".join(seeds), "failover", "w", "20")
    return await start(peer_exe, "ws://unused", *args, token=token, seconds=LIMIT * 2)


def acked_by_receiver(client: Client) -> dict[str, set[str]]:
    """Per socket URL: the keys of ops sent on it that an ``OP_ACK`` on it covered."""
    sent: dict[str, list[tuple[int, str]]] = {}
    acked: dict[str, set[str]] = {}
    for line in client.lines:
        if line.get("event") != "frame":
            continue
        url, msg = line["url"], line["msg"]
        if line["dir"] == "out" and line["type"] == "OP_BATCH":
            ops = msg["payload"]["ops"]
            sent.setdefault(url, []).extend((int(op["id"]), op["key"]) for op in ops)
        elif line["dir"] == "in" and line["type"] == "OP_ACK":
            last = int(msg["payload"]["lastId"])
            acked.setdefault(url, set()).update(k for i, k in sent.get(url, []) if i <= last)
    return acked


def alone(survivor: Node) -> Callable[[dict[str, Any]], bool]:
    """A ``PARTITION_MAP`` received that lists ``survivor`` as the only node."""

    def match(line: dict[str, Any]) -> bool:
        if line["dir"] != "in" or line["type"] != "PARTITION_MAP":
            return False
        return [n["nodeId"] for n in line["msg"]["payload"]["nodes"]] == [survivor.id]

    return match


async def survivor_keys(node: Node, token: str) -> set[str]:
    async with peer(node.topgun, token) as p:
        return set(await p.read())


@pytest.mark.parametrize("killed", ["n2", "n1"])
async def test_the_cluster_client_writes_on_through_a_killed_node(
    two_nodes: Cluster, topgun_peer: tuple[str, Path], killed: str
) -> None:
    """``n1`` is the client's first seed, the node it asks for new maps; ``n2`` the other."""
    cluster = two_nodes
    n1, n2 = cluster.nodes["n1"], cluster.nodes["n2"]
    survivor = n2 if killed == "n1" else n1
    token = issue_token(SECRET, "writer", {}, maps={"*": ["read", "write"]})
    await wait_for_nodes(n1.topgun, ["n1", "n2"], token)
    client = await cluster_client(topgun_peer, [n1.topgun, n2.topgun], token)
    try:
        async with asyncio.timeout(LIMIT):
            await client.until("progress", lambda line: line["written"] >= 60)
            written_before = client.events("progress")[-1]["written"]
            cluster.nodes[killed].kill()
            await client.until("frame", alone(survivor))  # the survivor's pushed map
            # the client carries on: 80 more writes, every one acked, on the survivor alone
            await client.until("progress")
            written_then = client.events("progress")[-1]["written"]
            await client.until(
                "progress",
                lambda line: (
                    line["written"] >= written_then + 80 and line["connected"] == [survivor.id]
                ),
            )
            client.say()  # stop writing
            await client.until("synced")
        (synced,) = client.events("synced")
        assert synced["connected"] == [survivor.id]
        acked = acked_by_receiver(client)
        every_ack = set().union(*acked.values())
        assert len(every_ack) >= written_before, "writes before the kill were not acked"
        assert len(acked.get(survivor.topgun, ())) > 80  # the survivor took the writes after
        after = {f"w-{i}" for i in range(written_then, synced["written"])}
        assert after <= every_ack
        written = {f"w-{i}" for i in range(synced["written"])}  # all marked synced
        held: set[str] = set()
        for _ in range(100):  # the survivor applies the other node's ops from the stream
            held = await survivor_keys(survivor, token)
            if every_ack | written <= held:
                break
            await asyncio.sleep(0.2)
        assert every_ack <= held, f"acknowledged, not on the survivor: {sorted(every_ack - held)}"
        assert written <= held, f"{len(written - held)} writes marked synced were lost"
    finally:
        if client.proc.returncode is None:
            client.proc.kill()
            await client.proc.wait()


def test_an_ack_counts_only_for_ops_sent_on_its_socket() -> None:
    """The helper above reads acks per socket: an ack on one socket never covers ops sent
    on another (the case the client itself gets wrong)."""
    lines: list[dict[str, Any]] = [
        frame("out", "OP_BATCH", "a", {"payload": {"ops": [{"id": "1", "key": "k1"}]}}),
        frame("out", "OP_BATCH", "b", {"payload": {"ops": [{"id": "2", "key": "k2"}]}}),
        frame("in", "OP_ACK", "b", {"payload": {"lastId": "2"}}),
    ]
    client = Client.__new__(Client)
    client.lines = lines
    assert acked_by_receiver(client) == {"b": {"k2"}}


def frame(direction: str, kind: str, url: str, msg: dict[str, Any]) -> dict[str, Any]:
    return {"event": "frame", "dir": direction, "type": kind, "url": url, "msg": msg}
