"""Presence and awareness over real sockets: served by the server with no producer, gone when a
connection closes or falls silent past the TTL, a connection sets only its own, bounded, and
never journaled."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import aiohttp

from octosync.client.shared import SharedDocument
from octosync.crdt.entries import node_of
from octosync.hub.crdt_streams import FEATURE
from octosync.hub.presence import MAX_VALUE_BYTES
from octosync.ipc.messages import CrdtOp, CrdtSync, WireStamp
from octosync.wire import DIALECTS
from tests.browser.support import JS_CLIENT, node_command
from tests.e2e.helpers import TIMEOUT, handshake, recv_json, serve, spawn_server

_JSON = DIALECTS["json"]


async def test_a_closed_connection_leaves_the_others_presence(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv:
        ann = SharedDocument(srv.ws_url, "room", peer=11)
        bob = SharedDocument(srv.ws_url, "room", peer=12)
        async with bob:
            seen: list[dict[int, object]] = []
            bob.presence.on_change(seen.append)
            bob.presence.set({"name": "bob"})
            async with ann:
                ann.presence.set({"name": "ann"})
                ann.awareness("cursor").set({"at": 3})
                await bob.wait_until(lambda: 11 in bob.presence.others, TIMEOUT)
                assert bob.presence.others == {11: {"name": "ann"}}
                await bob.wait_until(lambda: bob.awareness("cursor").others == {11: {"at": 3}})
                await ann.wait_until(lambda: ann.presence.others == {12: {"name": "bob"}})
                assert ann.presence.all == {11: {"name": "ann"}, 12: {"name": "bob"}}
                ann.presence.set({"name": "ann", "typing": True})
                await bob.wait_until(lambda: bob.presence.others[11].get("typing") is True)
            await bob.wait_until(lambda: 11 not in bob.presence.all, TIMEOUT)
            assert bob.presence.all == {12: {"name": "bob"}}
            assert seen[-1] == {12: {"name": "bob"}}
            # awareness outlives the connection until its TTL; a late joiner gets what is live
            late = SharedDocument(srv.ws_url, "room", peer=13)
            async with late:
                await late.synced(TIMEOUT)
                assert late.presence.others == {12: {"name": "bob"}}


async def test_a_silent_connection_leaves_after_the_ttl(tmp_path: Path) -> None:
    async with serve(tmp_path, presence_ttl=1.0) as srv, aiohttp.ClientSession() as http:
        watcher = SharedDocument(srv.ws_url, "room", peer=21, heartbeat=0.2)
        async with watcher:
            watcher.presence.set("here")
            await watcher.synced(TIMEOUT)
            ws = await http.ws_connect(f"{srv.ws_url}/lazily")
            await ws.send_str(handshake("room", peer_id=22, features=[FEATURE]).decode())
            await recv_json(ws)
            stamp = WireStamp(1_000_000, 0, 22)
            op = CrdtOp(node_of("presence"), stamp, b'"quiet"', key="presence/pr/22")
            await ws.send_bytes(_JSON.encode(CrdtSync(ops=(op,))))  # then never again
            await watcher.wait_until(lambda: watcher.presence.others == {22: "quiet"}, TIMEOUT)
            await watcher.wait_until(lambda: 22 not in watcher.presence.all, TIMEOUT)
            assert not ws.closed  # still connected, only silent
            assert watcher.presence.mine == "here"  # its own heartbeats keep it present
            await ws.close()


async def test_a_connection_sets_only_its_own_presence_within_bounds(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        watcher = SharedDocument(srv.ws_url, "room", peer=31)
        async with watcher:
            await watcher.synced(TIMEOUT)
            ws = await http.ws_connect(f"{srv.ws_url}/lazily")
            await ws.send_str(handshake("room", peer_id=32, features=[FEATURE]).decode())
            await recv_json(ws)
            while "frontier" not in (await recv_json(ws)):
                pass
            slot = node_of("presence")
            mine = CrdtOp(slot, WireStamp(1_000_000, 0, 32), b'"me"', key="presence/pr/32")
            forged = CrdtOp(slot, WireStamp(1_000_000, 1, 32), b'"you"', key="presence/pr/31")
            await ws.send_bytes(_JSON.encode(CrdtSync(ops=(mine, forged))))
            error = await recv_json(ws)
            assert (error["code"], error["path"]) == ("Forbidden", "ops[1].key")
            big = b'"' + b"x" * MAX_VALUE_BYTES + b'"'
            huge = CrdtOp(slot, WireStamp(1_000_000, 2, 32), big, key="presence/pr/32")
            await ws.send_bytes(_JSON.encode(CrdtSync(ops=(huge,))))
            error = await recv_json(ws)
            assert (error["code"], error["path"]) == ("LimitExceeded", "ops[0].state")
            await ws.send_bytes(_JSON.encode(CrdtSync(ops=(mine,))))
            await watcher.wait_until(lambda: watcher.presence.others == {32: "me"}, TIMEOUT)
            assert 31 not in watcher.presence.all  # neither refused frame set anything
            await ws.close()


async def test_presence_is_never_journaled(tmp_path: Path) -> None:
    async with spawn_server(tmp_path) as srv:
        doc = SharedDocument(srv.url, "room", peer=41)
        async with doc:
            doc.presence.set({"name": "ann"})
            doc.awareness("cursor").set(7)
            doc.counter("visits").add(1)
            await doc.synced(TIMEOUT)
            await doc.wait_until(lambda: doc.awareness("cursor").mine == 7, TIMEOUT)
            srv.proc.kill()
            srv.proc.wait()
    journals = list(tmp_path.rglob("*.sqlite3"))
    assert journals
    for path in journals:
        with sqlite3.connect(path) as db:
            for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
                for row in db.execute(f'SELECT * FROM "{table}"'):
                    blob = b"".join(c if isinstance(c, bytes) else str(c).encode() for c in row)
                    assert b"presence/pr/" not in blob
                    assert b"cursor/aw/" not in blob
    async with spawn_server(tmp_path) as srv2:
        fresh = SharedDocument(srv2.url, "room", peer=42)
        async with fresh:
            await fresh.synced(TIMEOUT)
            assert fresh.counter("visits").value == 1  # the journal holds the document
            assert fresh.presence.all == {}
            assert {op.key for op in fresh.cells.state.replica.ops()} == {"visits/pn/41"}


JS_TAB = """
import {{ connect }} from {module};
const client = connect({url});
const doc = client.openDocument("room", {{ peer: 51 }});
await doc.synced();
doc.presence.set({{ name: "js" }});
doc.awareness("cursor").set({{ at: 5 }});
while (doc.presence.others["52"]?.name !== "py") await new Promise((r) => doc.on("change", r));
console.log(JSON.stringify({{ all: doc.presence.all, entries: doc.entries.size }}));
await new Promise((r) => setTimeout(r, 100));
client.close();
process.exit(0);
"""


async def test_python_and_js_tabs_see_each_others_presence(tmp_path: Path) -> None:
    node = node_command()
    script = tmp_path / "tab.mjs"
    async with serve(tmp_path) as srv:
        script.write_text(
            JS_TAB.format(
                module=json.dumps((JS_CLIENT / "octosync.js").as_uri()), url=json.dumps(srv.ws_url)
            )
        )
        async with SharedDocument(srv.ws_url, "room", peer=52) as doc:
            doc.presence.set({"name": "py"})
            await doc.synced(TIMEOUT)
            js = await asyncio.create_subprocess_exec(
                *node, str(script), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
            )
            await doc.wait_until(lambda: doc.presence.others == {51: {"name": "js"}}, TIMEOUT)
            assert doc.awareness("cursor").others == {51: {"at": 5}}
            out, err = await asyncio.wait_for(js.communicate(), 60)
            assert js.returncode == 0, err.decode()[-3000:]
            seen = json.loads(out.decode().strip().splitlines()[-1])
            assert seen == {"all": {"51": {"name": "js"}, "52": {"name": "py"}}, "entries": 0}
            await doc.wait_until(lambda: 51 not in doc.presence.all, TIMEOUT)  # the tab closed
