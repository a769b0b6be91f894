"""TopGun's own client (``../shared/peers/topgun``) against octosync's ``/topgun`` face.

Each test starts the server on loopback and runs the real client under Node.js: ``peer.mjs``
(the peer's own scenarios) and ``topgun_scenarios.mjs`` (ours, beside this file, importing
the same bundles). Every process is bounded by ``--seconds``. Skips without Node.js or the peer
(fails under ``OCTOSYNC_REQUIRE_PEERS=1``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from octosync.server.auth import AuthConfig, issue_token
from octosync.server.topgun_state import topgun_state
from tests.e2e.helpers import serve

pytestmark = pytest.mark.peer

SCENARIOS = Path(__file__).with_name("topgun_scenarios.mjs")
SECRET = "topgun-interop-secret-of-32-bytes-or-more"
LIMIT = 15.0
"""Seconds any one client may take beyond its own ``--seconds`` before the test fails."""


class Client:
    """One real client process; its JSON lines, read as they come."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[dict[str, Any]] = []
        self._cursor = 0

    async def until(
        self, event: str, match: Callable[[dict[str, Any]], bool] | None = None
    ) -> None:
        """Read on until a line with ``event`` (and ``match``) after the previous one found."""
        assert self.proc.stdout is not None
        while True:
            while self._cursor < len(self.lines):
                line = self.lines[self._cursor]
                self._cursor += 1
                if line.get("event") == event and (match is None or match(line)):
                    return
            raw = await asyncio.wait_for(self.proc.stdout.readline(), LIMIT)
            assert raw, f"the client ended without {event!r}: {self.lines[-5:]}"
            self.lines.append(json.loads(raw))

    def say(self) -> None:
        """One line on the client's stdin (the ``topic`` scenario publishes on it)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"go\n")

    async def stop(self) -> None:
        """End a client that has shown what the test waited for."""
        self.proc.terminate()
        await asyncio.wait_for(self.proc.wait(), LIMIT)

    async def end(self) -> list[dict[str, Any]]:
        await self.until("end")
        await asyncio.wait_for(self.proc.wait(), LIMIT)
        return self.lines

    def events(self, name: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line.get("event") == name]

    def frames(self, direction: str, kind: str) -> list[dict[str, Any]]:
        return [
            line["msg"]
            for line in self.lines
            if line.get("event") == "frame" and line["dir"] == direction and line["type"] == kind
        ]


async def start(
    peer: tuple[str, Path],
    url: str,
    *args: str,
    ours: bool = True,
    token: str | None = None,
    seconds: float = 4.0,
    node_id: str | None = None,
) -> Client:
    node, peer_mjs = peer
    script = [str(SCENARIOS), str(peer_mjs.parent)] if ours else [str(peer_mjs)]
    opts = ["--url", f"{url}/topgun", "--seconds", str(seconds), "--frames"]
    if token is not None:
        opts += ["--token", token]
    if node_id is not None:
        opts += ["--node", node_id]
    proc = await asyncio.create_subprocess_exec(
        node,
        *script,
        *opts,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    return Client(proc)


def maps_of(line: dict[str, Any]) -> dict[str, Any]:
    return {"users": line["users"], "tags": line["tags"]}


def last_maps(client: Client) -> dict[str, Any]:
    (*_, state) = client.events("maps")
    return maps_of(state)


EXPECTED = {
    "users": {"u1": {"name": "Alice", "age": 30}, "u3": {"name": "Carol", "age": 41}},
    "tags": {"post-1": ["python"], "post-2": ["go"]},
}


async def test_two_writers_are_seen_live_and_by_merkle_sync_after_reconnect(
    tmp_path: Path, topgun_peer: tuple[str, Path]
) -> None:
    async with serve(tmp_path) as srv:
        watcher = await start(topgun_peer, srv.ws_url, "watch", seconds=6, node_id="watcher")
        await watcher.until("ready")
        alice, bob = await asyncio.gather(
            start(
                topgun_peer,
                srv.ws_url,
                "ops",
                'put=u1={"name":"Alice","age":30}',
                'put=u2={"name":"Bob","age":25}',
                "remove=u2",
                'oradd=post-1="rust"',
                'oradd=post-1="python"',
                'orremove=post-1="rust"',
                node_id="alice",
            ),
            start(
                topgun_peer,
                srv.ws_url,
                "ops",
                'put=u3={"name":"Carol","age":41}',
                'oradd=post-2="go"',
                node_id="bob",
            ),
        )
        for writer in (alice, bob):
            await writer.until("synced")
            await writer.end()
        # a client that connects now gets everything by Merkle sync, not by events
        late = await start(topgun_peer, srv.ws_url, "watch", seconds=6, node_id="late")
        for client in (late, watcher):
            await client.until("maps", lambda line: maps_of(line) == EXPECTED)
            await client.stop()
    assert last_maps(watcher) == EXPECTED
    live = watcher.frames("in", "SERVER_EVENT") + watcher.frames("in", "SERVER_BATCH_EVENT")
    assert live, "the watcher saw no live events"
    removes = [
        e
        for m in watcher.frames("in", "SERVER_BATCH_EVENT")
        for e in m["payload"]["events"]
        if e["eventType"] == "REMOVE"
    ] + [m["payload"] for m in watcher.frames("in", "SERVER_EVENT")]
    assert any(e["key"] == "u2" and e["record"]["value"] is None for e in removes)
    assert last_maps(late) == EXPECTED
    assert late.frames("in", "SYNC_RESP_LEAF")
    assert late.frames("in", "ORMAP_SYNC_RESP_LEAF")
    assert late.frames("in", "SERVER_EVENT") == []
    for writer in (alice, bob):
        (ack, *_) = writer.frames("in", "OP_ACK")
        assert ack["payload"]["achievedLevel"] == "MEMORY"


async def test_a_live_query_enters_updates_and_leaves(
    tmp_path: Path, topgun_peer: tuple[str, Path]
) -> None:
    async with serve(tmp_path) as srv:
        query = await start(topgun_peer, srv.ws_url, "query", seconds=6)
        await query.until("rows")  # the first (empty) result
        for op in ('put=a={"age":30}', 'put=a={"age":40}', 'put=a={"age":5}'):
            writer = await start(topgun_peer, srv.ws_url, "ops", op, 'put=z={"age":99}')
            await writer.until("synced")
            await writer.end()
        await query.until(
            "frame",
            lambda line: (
                line["msg"].get("type") == "QUERY_UPDATE"
                and line["msg"]["payload"]["changeType"] == "LEAVE"
            ),
        )
        await query.until("rows", lambda line: line["rows"] == [{"age": 99, "_key": "z"}])
        await query.stop()
    kinds = [m["payload"]["changeType"] for m in query.frames("in", "QUERY_UPDATE")]
    keyed = [
        (m["payload"]["key"], m["payload"]["changeType"])
        for m in query.frames("in", "QUERY_UPDATE")
    ]
    assert ("a", "ENTER") in keyed
    assert ("a", "UPDATE") in keyed
    assert ("a", "LEAVE") in keyed
    assert kinds.count("LEAVE") == 1
    (*_, final) = query.events("rows")
    assert final["rows"] == [{"age": 99, "_key": "z"}]


async def test_topic_messages_reach_the_other_subscriber_only(
    tmp_path: Path, topgun_peer: tuple[str, Path]
) -> None:
    topic = "chat/room-1"
    async with serve(tmp_path) as srv:
        # Long windows: the test stops the clients itself once they have shown what it waits
        # for, and on a loaded machine three clients can take seconds to start.
        bystander = await start(topgun_peer, srv.ws_url, "watch", seconds=12)
        one, two = await asyncio.gather(
            *(
                start(topgun_peer, srv.ws_url, "topic", topic, node_id=n, seconds=12)
                for n in ("one", "two")
            )
        )
        for c in (one, two, bystander):
            await c.until("ready")
        core = topgun_state(srv.runtime).core
        while len(core.topic_subscribers(topic)) < 2:  # the clients' TOPIC_SUB have no reply
            await asyncio.sleep(0.02)
        for c in (one, two):
            c.say()
        # Both must have received before either stops: with permessage-deflate the client
        # compresses on a worker thread, so a client that has received may not have sent yet.
        for c in (one, two):
            await c.until("topic")
        for c in (one, two):
            await c.stop()
        await bystander.stop()
    assert [e["data"] for e in one.events("topic")] == [{"text": "hello from two"}]
    assert [e["data"] for e in two.events("topic")] == [{"text": "hello from one"}]
    assert bystander.frames("in", "TOPIC_MESSAGE") == []
    for c in (one, two):
        (message,) = c.frames("in", "TOPIC_MESSAGE")
        assert message["payload"]["publisherId"]  # who published, as TopGun's server says


async def test_lock_contention_one_holder_at_a_time(
    tmp_path: Path, topgun_peer: tuple[str, Path]
) -> None:
    async with serve(tmp_path) as srv:
        holders = await asyncio.gather(
            *(start(topgun_peer, srv.ws_url, "lockhold", "resource-1", "500") for _ in range(2))
        )
        for c in holders:
            await c.end()
    spans = []
    for c in holders:
        (lock,) = c.events("lock")
        (unlock,) = c.events("unlock")
        assert lock["ok"] is True
        spans.append((lock["at"], unlock["at"], lock["token"]))
    first, second = sorted(spans)
    assert second[0] >= first[1], f"both held the lock at once: {spans}"
    assert second[2] > first[2] > 0  # fencing tokens grow


async def test_counters_converge(tmp_path: Path, topgun_peer: tuple[str, Path]) -> None:
    async with serve(tmp_path) as srv:
        counters = await asyncio.gather(
            *(
                start(topgun_peer, srv.ws_url, "counter", ours=False, seconds=2, node_id=n)
                for n in ("c1", "c2")
            )
        )
        for c in counters:
            await c.end()
    for c in counters:
        assert c.events("counter")[-1]["value"] == 2


async def test_tokens_grants_and_refusals(tmp_path: Path, topgun_peer: tuple[str, Path]) -> None:
    auth = AuthConfig(hs256_secret=SECRET)
    reader = issue_token(SECRET, "reader", {}, maps={"users": ["read"], "tags": ["read"]})
    expired = issue_token(
        SECRET, "old", {}, maps={"*": ["read", "write"]}, exp=int(time.time()) - 60
    )
    async with serve(tmp_path, insecure_dev=False, auth=auth) as srv:
        bad, old, refused = await asyncio.gather(
            start(topgun_peer, srv.ws_url, "ops", "put=x=1", token="not-a-jwt", seconds=2),
            start(topgun_peer, srv.ws_url, "ops", "put=x=1", token=expired, seconds=2),
            start(topgun_peer, srv.ws_url, "ops", "put=x=1", token=reader, seconds=2),
        )
        for c in (bad, old, refused):
            await c.end()
        stored = topgun_state(srv.runtime).core.maps.live_items("users")
    for c in (bad, old):
        assert c.frames("in", "AUTH_REQUIRED")
        (fail,) = c.frames("in", "AUTH_FAIL")
        assert fail["code"] == 401
        assert c.frames("in", "AUTH_ACK") == []
        assert c.events("synced") == []
    assert "expired" in old.frames("in", "AUTH_FAIL")[0]["error"]
    assert len(refused.frames("in", "AUTH_ACK")) == 1
    (rejected,) = refused.frames("in", "OP_REJECTED")
    assert "write" in rejected["payload"]["reason"]
    assert stored == {}


async def test_acknowledged_writes_survive_a_restart(
    tmp_path: Path, topgun_peer: tuple[str, Path]
) -> None:
    written = {"users": {"u1": {"name": "Alice", "age": 30}}, "tags": {"post-2": ["go"]}}
    async with serve(tmp_path, journal=True) as srv:
        writer = await start(
            topgun_peer, srv.ws_url, "ops", 'put=u1={"name":"Alice","age":30}', 'oradd=post-2="go"'
        )
        await writer.until("synced")
        await writer.end()
    async with serve(tmp_path, journal=True) as srv:
        reader = await start(topgun_peer, srv.ws_url, "watch", seconds=6)
        await reader.until("maps", lambda line: maps_of(line) == written)
        await reader.stop()
    assert reader.frames("in", "SYNC_RESP_LEAF")
