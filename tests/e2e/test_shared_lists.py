"""Lists in shared documents over real sockets: octosync.js (under Node) and the Python client
write the same entries for the same edits and converge when they edit one list at once;
lazily-py's own ``SeqCrdt`` edits the same list; a writer cannot create an element under
another peer's id; acknowledged list edits survive ``kill -9``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest

from octosync.client.shared import SharedDocument
from octosync.crdt.entries import node_of
from octosync.crdt.shared import SharedState
from octosync.hub.crdt_streams import FEATURE
from octosync.ipc.messages import CrdtOp, CrdtSync, WireStamp
from octosync.wire import DIALECTS
from tests.browser.support import JS_CLIENT, node_command
from tests.e2e.helpers import TIMEOUT, free_port, handshake, recv_json, serve, spawn_server
from tests.lazily_peer import require_lazily_python

_JSON = DIALECTS["json"]
SEQ_PEER = Path(__file__).with_name("lazily_seq_peer.py")
START = 1_000_000
"""The scripted writers' wall clock (milliseconds, long past: stamps behind the server's
clock are accepted, ahead of it they are not)."""

SCRIPT = [
    ["push", "a"],
    ["push", "b"],
    ["push", "c"],
    ["insert", 1, "x"],
    ["move", 0, 3],
    ["set", 2, {"b": [1, 2.5, None]}],
    ["delete", 1],
    ["push", "é"],
    ["move", 3, 0],
]

JS_SCRIPTED = """
import {{ connect }} from {module};
const script = {script};
let t = {start};
const client = connect({url});
const doc = client.openDocument({stream}, {{ peer: 11, clock: () => t++ }});
await doc.synced();
const list = doc.list("items");
const edits = [];
list.onEdit((change) => edits.push(change));
for (const [op, ...args] of script) {{
  if (op === "push") list.push(...args);
  else if (op === "insert") list.insert(...args);
  else if (op === "move") list.move(...args);
  else if (op === "set") list.set(...args);
  else if (op === "delete") list.delete(...args);
}}
await doc.synced();
const entries = [...doc.entries.values()].map((op) => [
  op.slot_id, op.key, [op.stamp.wall_time, op.stamp.logical, op.stamp.peer], [...op.bytes],
]);
console.log(JSON.stringify({{ value: list.value, entries, edits }}));
client.close();
process.exit(0);
"""


def entries_of(ops: tuple[CrdtOp, ...]) -> list[list[Any]]:
    return sorted(
        [o.slot_id, o.key, [o.stamp.wall_time, o.stamp.logical, o.stamp.peer], list(o.state)]  # type: ignore[arg-type]
        for o in ops
    )


def python_scripted() -> SharedState:
    ticks = iter(range(START, START + 1000))
    state = SharedState(11, ticks.__next__)
    for op, *args in SCRIPT:
        if op == "push":
            state.list_insert("items", len(state.list_values("items")), args[0])
        elif op == "insert":
            state.list_insert("items", args[0], args[1])
        elif op == "move":
            state.list_move("items", args[0], args[1])
        elif op == "set":
            state.list_set("items", args[0], args[1])
        else:
            state.list_delete("items", args[0])
    return state


async def run_node(tmp_path: Path, template: str, **fields: object) -> dict[str, Any]:
    """The last JSON line Node prints running ``template``, formatted with octosync.js's URL
    as ``module`` and with ``fields``."""
    node = node_command()
    script = tmp_path / "lists.mjs"
    script.write_text(
        template.format(module=json.dumps((JS_CLIENT / "octosync.js").as_uri()), **fields)
    )
    proc = await asyncio.create_subprocess_exec(
        *node, str(script), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()[-3000:]
    found: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return found


async def test_js_and_python_write_the_same_entries_for_the_same_list_edits(
    tmp_path: Path,
) -> None:
    async with serve(tmp_path) as srv:
        js = await run_node(
            tmp_path,
            JS_SCRIPTED,
            script=json.dumps(SCRIPT),
            start=START,
            url=json.dumps(srv.ws_url),
            stream=json.dumps("lists"),
        )
        ours = python_scripted()
        # byte for byte, stamp for stamp
        assert sorted(js["entries"]) == entries_of(ours.replica.ops())
        assert (
            tuple(js["value"])
            == ours.list_values("items")
            == ("é", "x", {"b": [1, 2.5, None]}, "a")
        )
        # and a Python reader of the server's document reads the list JS wrote
        async with SharedDocument(srv.ws_url, "lists") as reader:
            await reader.synced(TIMEOUT)
            assert reader.list("items").value == ours.list_values("items")
    moved = [e["moved"] for e in js["edits"] if e["moved"]]
    assert moved == [[{"from": 0, "to": 3, "value": "a"}], [{"from": 3, "to": 0, "value": "é"}]]


JS_EDITOR = """
import {{ connect }} from {module};
const client = connect({url});
const doc = client.openDocument({stream}, {{ peer: 31 }});
await doc.synced();
const list = doc.list("shared");
for (let i = 0; i < 30; i += 1) {{
  list.push(`js${{i}}`);
  if (i % 3 === 2) list.move(list.length - 1, 0);
  if (i % 7 === 6) list.delete(1);
  await new Promise((r) => setTimeout(r, 2));
}}
await doc.synced();
while (list.length < {total}) await new Promise((r) => list.on("change", r));
await new Promise((r) => setTimeout(r, 200));
await doc.synced();
const entries = [...doc.entries.values()].map((op) => [
  op.slot_id, op.key, [op.stamp.wall_time, op.stamp.logical, op.stamp.peer], [...op.bytes],
]);
console.log(JSON.stringify({{ value: list.value, entries }}));
client.close();
process.exit(0);
"""


async def test_js_and_python_editing_one_list_at_once_converge(tmp_path: Path) -> None:
    total = 30 - 4 + 30 - 5  # each side: 30 pushes, minus its deletes
    async with serve(tmp_path) as srv:
        node = run_node(
            tmp_path,
            JS_EDITOR,
            url=json.dumps(srv.ws_url),
            stream=json.dumps("together"),
            total=total,
        )
        async with SharedDocument(srv.ws_url, "together", peer=32) as doc:
            await doc.synced(TIMEOUT)
            js_task = asyncio.ensure_future(node)
            lst = doc.list("shared")
            for i in range(30):
                lst.push(f"py{i}")
                if i % 4 == 3:
                    lst.move(len(lst) - 1, 0)
                if i % 6 == 5:
                    lst.delete(0)
                await asyncio.sleep(0.002)
            await doc.synced(TIMEOUT)
            js = await js_task
            await doc.wait_until(lambda: len(lst) == total, TIMEOUT)
            await doc.wait_until(
                lambda: entries_of(doc.cells.state.replica.ops()) == sorted(js["entries"]), TIMEOUT
            )
            assert list(lst) == js["value"]
            assert len(set(lst)) == total  # every value once: no move duplicated anything
            assert {v for v in lst if v.startswith("js")} <= {f"js{i}" for i in range(30)}


async def test_an_element_minted_under_another_peer_is_refused_and_nothing_applied(
    tmp_path: Path,
) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        owner = SharedDocument(srv.ws_url, "board", peer=5)
        async with owner:
            owner.list("todo").push("milk")
            await owner.synced(TIMEOUT)
            ws = await http.ws_connect(f"{srv.ws_url}/lazily")
            await ws.send_str(handshake("board", peer_id=6, features=[FEATURE]).decode())
            await recv_json(ws)
            while "frontier" not in (await recv_json(ws)):
                pass
            slot = node_of("todo")
            stamp = WireStamp(2_000_000, 0, 6)
            body = msgspec.json.encode
            own = CrdtOp(slot, stamp, body("mine"), key="todo/lv/6.2000000.0")
            own_at = CrdtOp(slot, stamp, body([9, 0, 13]), key="todo/lp/6.2000000.0")
            forged = CrdtOp(slot, stamp, body("forged"), key="todo/lv/5.2000000.0")
            forged_at = CrdtOp(slot, stamp, body([1, 0, 11]), key="todo/lp/5.2000000.0")
            await ws.send_bytes(_JSON.encode(CrdtSync(ops=(own, own_at, forged, forged_at))))
            error = await recv_json(ws)
            assert (error["code"], error["path"]) == ("Forbidden", "ops[2].key")
            absurd = CrdtOp(slot, stamp, body([1] * 1000), key="todo/lp/6.2000000.0")
            await ws.send_bytes(_JSON.encode(CrdtSync(ops=(own, absurd))))
            error = await recv_json(ws)
            assert (error["code"], error["path"]) == ("CrdtValueError", "ops[1].state")
            # moving someone else's existing element is an ordinary edit
            element = owner.cells.state.list_elements("todo")[0].id
            move = CrdtOp(
                slot, WireStamp(2_000_001, 0, 6), body([7, 0, 13]), key=f"todo/lp/{element}"
            )
            await ws.send_bytes(_JSON.encode(CrdtSync(ops=(move,))))
            ack = await recv_json(ws)
            assert ack["ops"][0]["key"] == f"todo/lp/{element}"
            await ws.close()
            late = SharedDocument(srv.ws_url, "board", peer=8)
            async with late:
                await late.synced(TIMEOUT)
                assert late.list("todo").value == ("milk",)  # neither refused frame left a trace
                assert {op.key for op in late.cells.state.replica.ops()} == {
                    f"todo/lv/{element}",
                    f"todo/lp/{element}",
                }


async def test_acknowledged_list_edits_survive_kill_9(tmp_path: Path) -> None:
    async with spawn_server(tmp_path) as srv:
        doc = SharedDocument(srv.url, "doc")
        async with doc:
            lst = doc.list("order")
            for v in ("one", "two", "three", "four"):
                lst.push(v)
            lst.move(3, 0)
            lst.set(1, "ONE")
            lst.delete(2)
            await doc.synced(TIMEOUT)
            srv.proc.kill()  # kill -9 right after the acknowledgements
            srv.proc.wait()
    async with spawn_server(tmp_path) as srv2:
        fresh = SharedDocument(srv2.url, "doc")
        async with fresh:
            await fresh.synced(TIMEOUT)
            assert fresh.list("order").value == ("four", "ONE", "three")


@pytest.mark.peer
async def test_lazily_py_seqcrdt_edits_one_list_with_the_python_client(tmp_path: Path) -> None:
    """lazily-py's own ``SeqCrdt`` (lazily_seq_peer.py) appends, moves and sets while the
    Python client inserts and deletes: both end with one list, every edit in it."""
    lazily_python = require_lazily_python()
    tcp = free_port()
    async with (
        spawn_server(tmp_path, "--tcp-port", str(tcp)) as srv,
        SharedDocument(srv.url, "seq-interop", peer=32) as doc,
    ):
        lst = doc.list("items")
        for v in "abc":
            lst.push(v)
        await doc.synced(TIMEOUT)
        peer = await asyncio.create_subprocess_exec(
            str(lazily_python),
            str(SEQ_PEER),
            str(tcp),
            "seq-interop",
            "424243",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        await doc.wait_until(lambda: "L1" in lst.value and "B" in lst.value, 60)
        assert lst.value == ("B", "c", "a", "L1")  # a moved after c, b set, L1 appended
        lst.insert(0, "P0")
        lst.delete(lst.value.index("c"))
        await doc.synced(TIMEOUT)
        out, err = await asyncio.wait_for(peer.communicate(), 90)
        assert peer.returncode == 0, err.decode()[-3000:]
        found = json.loads(out.decode().strip().splitlines()[-1])
        assert found["errors"] == []
        assert tuple(found["values"]) == lst.value == ("P0", "B", "a", "L1")


async def test_a_writer_moves_sets_and_removes_another_writers_elements(tmp_path: Path) -> None:
    """Creating an element is its minting peer's alone; editing one is anyone's: a removal
    writes an entry the element never had, and is accepted."""
    async with serve(tmp_path) as srv:
        ann = SharedDocument(srv.ws_url, "shared", peer=61)
        bob = SharedDocument(srv.ws_url, "shared", peer=62)
        async with ann, bob:
            for v in ("a", "b", "c"):
                ann.list("l").push(v)
            await ann.synced(TIMEOUT)
            await bob.wait_until(lambda: len(bob.list("l")) == 3, TIMEOUT)
            bob.list("l").delete(0)  # ann's element
            bob.list("l").set(0, "B")
            bob.list("l").move(1, 0)
            await bob.synced(TIMEOUT)
            assert bob.errors == []
            await ann.wait_until(lambda: ann.list("l").value == ("c", "B"), TIMEOUT)
