"""Multi-writer streams over real sockets: concurrent writers lose nothing, the stream outlives
every writer and a restart, refusals are typed, and offline edits merge on reconnect."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from pathlib import Path

import aiohttp
import msgspec
import pytest

from octosync.client.shared import SharedDocument
from octosync.crdt.shared import node_of
from octosync.errors import StorageError
from octosync.hub.crdt_streams import FEATURE
from octosync.ipc.messages import CrdtOp, CrdtSync, WireStamp
from octosync.server.auth import AuthConfig, issue_token
from octosync.server.lazily_state import lazily_state
from octosync.wire import DIALECTS
from tests.e2e.helpers import TIMEOUT, handshake, recv_json, serve, spawn_server

_JSON = DIALECTS["json"]
CLOSED = (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED)


async def test_five_writers_adding_concurrently_lose_nothing(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv:
        docs = [SharedDocument(srv.ws_url, "board") for _ in range(5)]
        for doc in docs:
            await doc.start()

        async def clicks(doc: SharedDocument) -> None:
            for _ in range(40):
                doc.counter("clicks").add(1)
                await asyncio.sleep(0)

        await asyncio.gather(*(clicks(d) for d in docs))
        for doc in docs:
            await doc.synced(TIMEOUT)
        for doc in docs:
            await doc.wait_until(lambda d=doc: d.counter("clicks").value == 200, TIMEOUT)
        docs[0].map("todo").set("milk", False)
        docs[1].map("todo").set("eggs", True)
        docs[2].multi("owner").set("ann")
        docs[3].multi("owner").set("bob")
        for doc in docs:
            await doc.synced(TIMEOUT)
        for doc in docs:
            await doc.close()
        late = SharedDocument(srv.ws_url, "board")
        async with late:
            await late.synced(TIMEOUT)
            assert late.counter("clicks").value == 200  # nobody connected: the stream lived on
            assert late.map("todo").value == {"milk": False, "eggs": True}
            assert sorted(late.multi("owner").value) == ["ann", "bob"]  # concurrent: both kept


async def test_a_writer_speaks_for_its_own_peer_only_and_hears_why(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        ws = await http.ws_connect(f"{srv.ws_url}/lazily")
        await ws.send_str(handshake("board", peer_id=5, features=[FEATURE]).decode())
        reply = await recv_json(ws)
        assert FEATURE in reply["features"]
        state = await recv_json(ws)
        assert state == {"type": "crdt_sync", "frontier": []}  # no ops yet
        forged = CrdtOp(slot_id=1, stamp=WireStamp(1, 0, 6), state=b"1", key="x/lww")
        await ws.send_bytes(_JSON.encode(CrdtSync(ops=(forged,))))
        error = await recv_json(ws)
        assert (error["code"], error["path"]) == ("Forbidden", "ops[0].stamp.peer")
        own = msgspec.structs.replace(forged, stamp=WireStamp(1, 0, 5))
        await ws.send_bytes(_JSON.encode(CrdtSync(ops=(own,))))
        ack = await recv_json(ws)  # the echo: journaled, then acknowledged
        assert ack["ops"][0]["stamp"] == {"wall_time": 1, "logical": 0, "peer": 5}
        await ws.close()


async def test_a_writer_cannot_erase_another_writers_clicks(tmp_path: Path) -> None:
    """Peer 6, stamping honestly as itself, sends peer 5's counter entry as [0, 0] (and then a
    counter entry of its own that is not JSON): each frame is refused whole, naming the field,
    and every reader still counts peer 5's clicks."""
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        clicker = SharedDocument(srv.ws_url, "board", peer=5)
        reader = SharedDocument(srv.ws_url, "board", peer=7)
        async with clicker, reader:
            for _ in range(5):
                clicker.counter("clicks").add(1)
            await clicker.synced(TIMEOUT)
            await reader.wait_until(lambda: reader.counter("clicks").value == 5, TIMEOUT)
            ws = await http.ws_connect(f"{srv.ws_url}/lazily")
            await ws.send_str(handshake("board", peer_id=6, features=[FEATURE]).decode())
            await recv_json(ws)  # the handshake's answer
            while "frontier" not in (await recv_json(ws)):
                pass  # the document's state, up to its frontier
            slot = node_of("clicks")
            mine = CrdtOp(slot, WireStamp(2**40, 0, 6), b"[1,0]", key="likes/pn/6")
            erase = CrdtOp(slot, WireStamp(2**40, 0, 6), b"[0,0]", key="clicks/pn/5")
            await ws.send_bytes(_JSON.encode(CrdtSync(ops=(mine, erase))))
            error = await recv_json(ws)
            assert (error["code"], error["path"]) == ("Forbidden", "ops[1].key")
            garbage = CrdtOp(slot, WireStamp(2**40, 1, 6), b"\xff{not json", key="clicks/pn/6")
            await ws.send_bytes(_JSON.encode(CrdtSync(ops=(garbage,))))
            error = await recv_json(ws)
            assert (error["code"], error["path"]) == ("CrdtValueError", "ops[0].state")
            await ws.close()
            reader.counter("likes").add(1)  # a later edit of the reader's own goes through
            await reader.synced(TIMEOUT)
            late = SharedDocument(srv.ws_url, "board", peer=8)
            async with late:
                await late.synced(TIMEOUT)
                assert late.counter("clicks").value == 5
                assert late.counter("likes").value == 1  # peer 6's frame took nothing
                keys = {op.key for op in late.cells.state.replica.ops()}
                assert keys == {"clicks/pn/5", "likes/pn/7"}


async def test_a_graph_stream_name_cannot_be_joined_as_a_plane(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        doc = SharedDocument(srv.ws_url, "shared")
        async with doc:
            await doc.synced(TIMEOUT)
            ws = await http.ws_connect(f"{srv.ws_url}/lazily")
            await ws.send_str(handshake("shared", publish=True).decode())
            refused = json.loads(await asyncio.wait_for(ws.receive_str(), TIMEOUT))
            assert (refused["code"], refused["path"]) == ("HandshakeFailed", "session_id")
            await ws.close()


async def test_offline_edits_merge_on_reconnect_and_survive_kill_9(tmp_path: Path) -> None:
    async with spawn_server(tmp_path) as srv:
        a = SharedDocument(srv.url, "doc")
        b = SharedDocument(srv.url, "doc")
        async with a, b:
            a.counter("n").add(3)
            b.register("title").set("draft")
            await a.synced(TIMEOUT)
            await b.synced(TIMEOUT)
            srv.proc.kill()  # kill -9: acknowledged edits are journaled
            srv.proc.wait()
            a.counter("n").add(4)  # offline edits, queued
            b.counter("n").add(-1)
            assert a.pending
            assert b.pending
    async with spawn_server(tmp_path) as srv2:
        # the same replicas again (their pending edits kept) against the restarted server
        a.url = b.url = srv2.url + "/lazily"
        async with a, b:
            await a.synced(TIMEOUT)
            await b.synced(TIMEOUT)
            fresh = SharedDocument(srv2.url, "doc")
            async with fresh:
                await fresh.synced(TIMEOUT)
                assert fresh.counter("n").value == 6
                assert fresh.register("title").value == "draft"


async def test_a_failed_commit_fails_the_ack_and_sends_the_op_nowhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with (
        serve(tmp_path, journal=True) as srv,
        aiohttp.ClientSession() as http,
        SharedDocument(srv.ws_url, "board") as reader,
    ):
        await reader.synced(TIMEOUT)
        writer = srv.runtime.writer
        assert writer is not None

        def disk_full(encoded: object) -> list[int]:
            raise StorageError("database or disk is full")

        monkeypatch.setattr(writer.journal, "append_encoded", disk_full)  # fault injection
        ws = await http.ws_connect(f"{srv.ws_url}/lazily")
        await ws.send_str(handshake("board", peer_id=5, features=[FEATURE]).decode())
        await recv_json(ws)  # the reply
        await recv_json(ws)  # the state
        op = CrdtOp(slot_id=1, stamp=WireStamp(1, 0, 5), state=b"1", key="x/lww")
        await ws.send_bytes(_JSON.encode(CrdtSync(ops=(op,))))
        error = await recv_json(ws)
        assert error["code"] == "JournalUnavailable"  # the ack failed, and the writer knows
        assert (await asyncio.wait_for(ws.receive(), TIMEOUT)).type in CLOSED
        monkeypatch.undo()
        assert lazily_state(srv.runtime).plane.core.state_of("board") == ()
        reader.register("probe").set(1)  # its echo comes after anything queued before
        await reader.synced(TIMEOUT)
        assert [o.key for o in reader.cells.state.replica.ops()] == ["probe/lww"]


async def test_a_large_document_arrives_in_frames_and_joined_means_all_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("octosync.server.plane.JOIN_CHUNK", 7)
    async with serve(tmp_path) as srv:
        async with SharedDocument(srv.ws_url, "big") as writer:
            for i in range(30):
                writer.map("fields").set(f"f{i}", i)
            await writer.synced(TIMEOUT)
        async with SharedDocument(srv.ws_url, "big") as late:
            await late.synced(TIMEOUT)
            assert late.map("fields").value == {f"f{i}": i for i in range(30)}


async def test_a_document_started_again_is_synced_only_once_its_new_session_joined(
    tmp_path: Path,
) -> None:
    """Closed and started again, a document's ``synced()`` waits for the server's state of
    the new session: what another writer did meanwhile is there when it resolves."""
    async with serve(tmp_path) as srv:
        bob = SharedDocument(srv.ws_url, "again")
        async with bob:
            bob.counter("n").add(1)
            await bob.synced(TIMEOUT)
        async with SharedDocument(srv.ws_url, "again") as ann:
            ann.counter("n").add(10)
            await ann.synced(TIMEOUT)
        async with bob:
            await bob.synced(TIMEOUT)
            assert bob.counter("n").value == 11


async def test_node_grants_give_each_writer_its_own_values(tmp_path: Path) -> None:
    secret = "plane-grants-secret-plane-grants-secret!"
    auth = AuthConfig(hs256_secret=secret)

    def token(subject: str, nodes: dict[str, list[str]]) -> str:
        return issue_token(secret, subject, {"room": ["read", "write"]}, nodes={"room": nodes})

    host = token("host", {"read": ["*"], "write": ["*"]})
    guest = token("guest", {"read": ["board/*", "guest/*"], "write": ["guest/*"]})
    async with (
        serve(tmp_path, insecure_dev=False, auth=auth) as srv,
        SharedDocument(srv.ws_url, "room", token=host) as h,
    ):
        h.register("board").set("open")
        h.map("notes").set("plan", "secret")
        await h.synced(TIMEOUT)
        async with SharedDocument(srv.ws_url, "room", token=guest) as g:
            await g.synced(TIMEOUT)
            assert g.register("board").value == "open"
            assert g.map("notes").value == {}  # never sent
            g.counter("guest").add(3)
            await g.synced(TIMEOUT)
            await h.wait_until(lambda: h.counter("guest").value == 3, TIMEOUT)
            h.map("notes").set("plan", "changed")
            h.register("board").set("closed")
            await g.wait_until(lambda: g.register("board").value == "closed", TIMEOUT)
            assert g.map("notes").value == {}
            assert g.errors == []


async def test_a_compacted_history_restarts_to_the_same_document(tmp_path: Path) -> None:
    config = tmp_path / "octosync.toml"
    config.write_text("[server]\ncheckpoint_interval = 0.2\nplane_compact_records = 1000\n")
    data = tmp_path / "data"
    journal = data / "journal.sqlite3"

    def plane_records() -> int:
        with contextlib.closing(sqlite3.connect(f"file:{journal}?mode=ro", uri=True)) as db:
            (count,) = db.execute("SELECT count(*) FROM journal WHERE kind = 'plane'").fetchone()
        return int(count)

    async with spawn_server(data, "--config", str(config)) as srv:
        async with aiohttp.ClientSession() as http:
            ws = await http.ws_connect(f"{srv.url}/lazily")
            await ws.send_str(handshake("doc", peer_id=5, features=[FEATURE]).decode())
            await recv_json(ws)  # the reply
            await recv_json(ws)  # the (empty) document
            frames = 1200
            for i in range(frames):  # one frame, one journal record each: n/pn/5 counts up
                stamp = WireStamp(1_000 + i, 0, 5)
                ops = (
                    CrdtOp(node_of("n"), stamp, b"[%d,0]" % (i + 1), key="n/pn/5"),
                    CrdtOp(node_of("last"), stamp, b"%d" % i, key="last/lww"),
                )
                await ws.send_bytes(_JSON.encode(CrdtSync(ops=ops)))
            acked = 0
            while acked < 2 * frames:  # every op echoed: journaled
                acked += len((await recv_json(ws)).get("ops", []))
            await ws.close()
        async with asyncio.timeout(TIMEOUT):  # a maintenance round compacts it
            while plane_records() > 10:
                await asyncio.sleep(0.1)
        srv.proc.kill()  # kill -9 right after
        srv.proc.wait()
    async with spawn_server(data, "--config", str(config)) as srv2:
        fresh = SharedDocument(srv2.url, "doc")
        async with fresh:
            await fresh.synced(TIMEOUT)
            assert fresh.counter("n").value == frames
            assert fresh.register("last").value == frames - 1
