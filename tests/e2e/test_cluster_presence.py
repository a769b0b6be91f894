"""Presence and awareness across a cluster's nodes, with real processes on loopback: a NATS
server and two ``octosync serve --cluster`` nodes, each with members of one document through
octosync's Python client.

A member sees the presence of members on the other node (set, changed, ended on close), one
joining later gets what is live at once rather than at the others' next heartbeat, and a node
killed with ``kill -9`` takes its members' presence with it within the TTL. Every wait is
bounded; every process is killed in the finalizer.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from octosync.client.shared import SharedDocument
from octosync.links import nats_server
from octosync.links.cluster_cli import start_node
from tests.e2e.helpers import free_port
from tests.e2e.test_cluster_maps import Node

WAIT = 10.0
"""Each wait: well under the 30-second TTL where an ending must come from the other node, not
from the TTL."""


@contextlib.contextmanager
def two_nodes(root: Path, ttl: float) -> Iterator[tuple[Node, Node]]:
    port = free_port()
    procs: list[subprocess.Popen[bytes]] = [nats_server.start(root / "nats", port)]
    config = root / "octosync.toml"
    config.write_text(f"[server]\npresence_ttl = {ttl}\n")
    try:
        nodes = []
        for node_id in ("n1", "n2"):
            node_port = free_port()
            proc = start_node(
                f"nats://127.0.0.1:{port}",
                node_id,
                node_port,
                root / node_id,
                extra=["--config", str(config)],
            )
            procs.append(proc)
            nodes.append(Node(node_id, node_port, root / node_id, proc))
        yield nodes[0], nodes[1]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)


@pytest.mark.slow
async def test_members_on_two_nodes_see_each_others_presence(tmp_path: Path) -> None:
    with two_nodes(tmp_path, ttl=30.0) as (a, b):
        ann = SharedDocument(a.lazily, "room", peer=11, heartbeat=20.0)
        async with ann:
            ann.presence.set({"name": "ann"})
            ann.awareness("cursor").set({"at": 3})
            await ann.synced(WAIT)
            bob = SharedDocument(b.lazily, "room", peer=12, heartbeat=20.0)
            async with bob:
                # joined after ann set hers, her heartbeat 20 s away: node B asked node A
                await bob.wait_until(lambda: bob.presence.others == {11: {"name": "ann"}}, WAIT)
                await bob.wait_until(lambda: bob.awareness("cursor").others == {11: {"at": 3}})
                bob.presence.set({"name": "bob"})
                await ann.wait_until(lambda: ann.presence.others == {12: {"name": "bob"}}, WAIT)
                ann.presence.set({"name": "ann", "typing": True})
                await bob.wait_until(
                    lambda: bob.presence.others.get(11) == {"name": "ann", "typing": True}, WAIT
                )
            # bob's connection closed on B: A's members learn it from B, not by the TTL
            await ann.wait_until(lambda: 12 not in ann.presence.all, WAIT)
            assert ann.presence.all == {11: {"name": "ann", "typing": True}}


@pytest.mark.slow
async def test_a_killed_nodes_members_leave_the_others_presence_within_the_ttl(
    tmp_path: Path,
) -> None:
    with two_nodes(tmp_path, ttl=2.0) as (a, b):
        ann = SharedDocument(a.lazily, "room", peer=21, heartbeat=0.5)
        bob = SharedDocument(b.lazily, "room", peer=22, heartbeat=0.5)
        async with bob:
            bob.presence.set("bob")
            async with ann:
                ann.presence.set("ann")
                await bob.wait_until(lambda: bob.presence.others == {21: "ann"}, WAIT)
                # alive, her heartbeats (the same value) keep her on B well past the TTL
                for _ in range(4):
                    await asyncio.sleep(1.0)
                    assert bob.presence.others == {21: "ann"}
                a.kill()  # no ending is ever sent: B ends ann's presence by its TTL
                await bob.wait_until(lambda: 21 not in bob.presence.all, WAIT)
                assert bob.presence.all == {22: "bob"}
