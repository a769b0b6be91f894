"""Writers' requests end to end: stamped with who asked, checked per node, answered to the writer.

A real server with tokens, a producer with per-writer permissions and two writers holding
different node grants; everything over loopback WebSockets.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest

import octosync
from octosync import Context
from octosync.client.lazily import Writer
from octosync.errors import Forbidden
from octosync.ipc.permissions import PeerPermissions
from octosync.server.auth import AuthConfig, issue_token
from tests.e2e.helpers import serve

SECRET = "remote-ops-test-secret-remote-ops-test!"


def token(subject: str, actions: list[str], nodes: dict[str, list[str]]) -> str:
    return issue_token(SECRET, subject, {"game": actions}, nodes={"game": nodes})


async def test_writers_are_answered_and_see_only_their_nodes(tmp_path: Path) -> None:
    ctx = Context()
    board = ctx.cell("open", type_tag="string", name="board/state")
    alice = ctx.cell(0, type_tag="i64", name="players/alice/score")
    bob = ctx.cell(0, type_tag="i64", name="players/bob/score")
    rings: list[str] = []
    bell = ctx.effect(lambda: rings.append("ring") if board.get() == "open" else None)
    rings.clear()  # the effect's first run, when it was made
    asked: list[Writer] = []

    def permissions_for(writer: Writer) -> PeerPermissions:
        asked.append(writer)
        own = {"alice": alice.id, "bob": bob.id}.get(writer.subject or "")
        perms = PeerPermissions(write=[own] if own is not None else [])
        if writer.subject == "alice":
            perms.grant("trigger_effect", bell.id)
        return perms

    auth = AuthConfig(hs256_secret=SECRET)
    async with serve(tmp_path, insecure_dev=False, auth=auth) as srv:
        owner = issue_token(SECRET, "owner", {"game": ["publish"]})
        mine = ["board/*", "players/alice/*"]
        alice_token = token(
            "alice",
            ["read", "write", "trigger_effect"],
            {"read": mine, "write": ["players/alice/*"], "trigger_effect": [f"#{bell.id}"]},
        )
        # bob's token lets him ask to write any player's score: the producer says no.
        bob_token = token("bob", ["read", "write"], {"read": ["*"], "write": ["players/*"]})
        async with (
            octosync.connect(srv.ws_url, token=owner) as p,
            octosync.connect(srv.ws_url, token=alice_token) as a,
            octosync.connect(srv.ws_url, token=bob_token) as b,
        ):
            await p.publish("game", ctx, permissions_for=permissions_for)
            sub_a = await a.subscribe("game")
            sub_b = await b.subscribe("game")
            first = await asyncio.wait_for(sub_a.wait_for(lambda s: "board/state" in s.names), 5)
            assert sorted(first.names) == ["board/state", "players/alice/score"]
            await asyncio.wait_for(sub_b.wait_for(lambda s: "players/bob/score" in s.names), 5)

            assert await sub_a.write("players/alice/score", 5) is True
            assert alice.get() == 5
            with pytest.raises(Forbidden, match="board/state"):
                await sub_a.write("board/state", "won")  # refused by the server: no node grant
            with pytest.raises(Forbidden, match=f"node {alice.id}"):
                await sub_b.write("players/alice/score", 1)  # refused by the producer
            assert (alice.get(), bob.get(), board.get()) == (5, 0, "open")
            assert [w.subject for w in asked] == ["alice", "bob"]
            assert len({w.peer for w in asked}) == 2

            assert await sub_a.trigger(bell.id) is True
            assert rings == ["ring"]
            with pytest.raises(Forbidden, match="not granted trigger_effect"):
                await sub_b.trigger(bell.id)
            assert rings == ["ring"]

            # Flushes alice may not see are skipped; her next delta spans them, no resync.
            for score in range(1, 6):
                bob.set(score)
            board.set("closed")
            state = await asyncio.wait_for(
                sub_a.wait_for(lambda s: s.by_name.get("board/state") == "closed"), 5
            )
            assert bob.id not in state.values
            assert sub_a.resyncs == 0
            assert sub_a.errors == [e for e in sub_a.errors if isinstance(e, Forbidden)]
            await asyncio.wait_for(sub_b.wait_for(lambda s: s.values.get(bob.id) == 5), 5)


async def test_a_writer_cannot_speak_for_another(tmp_path: Path) -> None:
    ctx = Context()
    score = ctx.cell(0, type_tag="i64", name="score")
    async with serve(tmp_path) as srv, octosync.connect(srv.ws_url) as p:
        await p.publish("s", ctx)
        async with aiohttp.ClientSession() as http:
            ws = await http.ws_connect(f"{srv.ws_url}/lazily")
            await ws.send_str(
                '{"protocol_id":"lazily-ipc","protocol_major_version":1,"codec":"json",'
                '"max_frame_size":65536,"fragmentation_supported":false,'
                '"ordered_reliable":true,"peer_id":0,"session_id":"s"}'
            )
            await ws.receive()  # the handshake reply
            await ws.receive()  # the snapshot
            await ws.send_str(
                f'{{"type":"remote_op","kind":"write","node":{score.id},"payload":"MQ==",'
                '"request":7,"peer":1,"subject":"owner"}'
            )
            answer = await asyncio.wait_for(ws.receive(), 5)
            assert answer.json() == {
                "type": "remote_op_result",
                "request": 7,
                "error": "Forbidden",
                "message": "peer and subject are set by the server, not the writer",
            }
            await ws.close()
    assert score.get() == 0
