"""lazily-py's ``TextCrdt`` as a real peer of one shared text, through a real server.

lazily-py's text CRDT is the same algorithm (ids ``(counter, peer)`` from a Lamport counter, a
left origin per character, siblings in descending id order), but it exchanges its own
``TextOp`` element records by ``delta_since``/``apply_delta``, not plane entries. Following
``docs/crdt.md``'s table, its elements map onto a text's entries one to one: each inserted
character is a run character of ``NAME/tx/PEER/CHUNK`` at its counter, each deletion an id range
of the deleter's ``NAME/td/PEER/N``. This test is that mapping: lazily-py edits concurrently
with an octosync replica, its elements go through the server as peer 9's entries, octosync's
entries come back to it as ``TextOp``s, and both end with the same text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from octosync.client.shared import SharedDocument
from octosync.crdt.shared import node_of
from octosync.crdt.text import CHUNK
from octosync.ipc.messages import CrdtOp
from tests.e2e.helpers import TIMEOUT, serve
from tests.lazily_peer import require_lazily_python, run_lazily

pytestmark = pytest.mark.peer

NAME = "t"
LAZILY_PEER = 9

EDIT = """
import json, sys
from lazily.textcrdt import TextCrdt, TextOp
crdt = TextCrdt(peer=%d)
crdt.apply_delta([TextOp.from_json(o) for o in json.loads(sys.stdin.read())])
for i, ch in enumerate(" dear"):  # concurrent with the octosync replica's edits
    crdt.insert(5 + i, ch)
crdt.delete(0)
print(json.dumps({"text": crdt.text(), "ops": [o.to_json() for o in crdt.delta_since({})]}))
"""

MERGE = """
import json, sys
from lazily.textcrdt import TextCrdt, TextOp
mine, theirs = json.loads(sys.stdin.read())
crdt = TextCrdt(peer=%d)
crdt.apply_delta([TextOp.from_json(o) for o in mine])
crdt.apply_delta([TextOp.from_json(o) for o in theirs])
print(json.dumps(crdt.text()))
"""


def text_ops(doc: SharedDocument) -> list[dict[str, Any]]:
    """Every character of ``doc``'s text as lazily-py ``TextOp`` JSON (a deletion's id is
    not kept in the entries: the deleter and the character's clock stand in for it)."""
    deleted: dict[tuple[int, int], int] = {}
    runs = []
    for op in doc.cells.state.replica.ops():
        _, tag, peer, _ = (op.key or "").split("/")
        value = msgspec.json.decode(op.state)  # type: ignore[arg-type]
        if tag == "td":
            for p, c, n in value:
                for k in range(c, c + n):
                    deleted[(p, k)] = int(peer)
        else:
            runs += [(int(peer), row) for row in value]
    out = []
    for peer, (clock, text, op_peer, op_clock) in runs:
        for i, ch in enumerate(text):
            origin = [op_clock, op_peer] if i == 0 else [clock + i - 1, peer]
            entry: dict[str, Any] = {
                "id": [clock + i, peer],
                "ch": ch,
                "origin": None if origin == [0, 0] else origin,
                "deleted": (peer, clock + i) in deleted,
            }
            if entry["deleted"]:
                entry["delete_id"] = [clock + i, deleted[(peer, clock + i)]]
            out.append(entry)
    return out


def entries_of(ops: list[dict[str, Any]], writer: int) -> list[tuple[str, bytes]]:
    """``writer``'s part of lazily-py's elements as a text's entries: its characters as maximal
    runs per 64-clock chunk, the ranges it deleted as its deletion chunks."""
    chunks: dict[int, list[list[Any]]] = {}
    for op in sorted((o for o in ops if o["id"][1] == writer), key=lambda o: o["id"][0]):
        clock = op["id"][0]
        origin = [0, 0] if op["origin"] is None else [op["origin"][1], op["origin"][0]]
        rows = chunks.setdefault(clock // CHUNK, [])
        last = rows[-1] if rows else None
        if last and last[0] + len(last[1]) == clock and origin == [writer, clock - 1]:
            last[1] += op["ch"]
        else:
            rows.append([clock, op["ch"], *origin])
    out = [
        (f"tx/{writer}/{c}", json.dumps(rows, separators=(",", ":")).encode())
        for c, rows in chunks.items()
    ]
    gone = sorted((o["id"][1], o["id"][0]) for o in ops if o.get("delete_id", [0, 0])[1] == writer)
    ranges = [[p, c, 1] for p, c in gone]
    for n in range(0, len(ranges), 64):
        out.append((f"td/{writer}/{n // 64}", json.dumps(ranges[n : n + 64]).encode()))
    return out


async def test_lazily_py_and_octosync_edit_one_text_and_end_equal(tmp_path: Path) -> None:
    require_lazily_python()  # skips (fails under OCTOSYNC_REQUIRE_PEERS) without lazily-py
    async with serve(tmp_path) as srv:
        ours = SharedDocument(srv.ws_url, "doc")
        bridge = SharedDocument(srv.ws_url, "doc", peer=LAZILY_PEER)
        async with ours, bridge:
            body = ours.text(NAME)
            body.insert(0, "hello world")
            await ours.synced(TIMEOUT)
            start = text_ops(ours)
            edited = json.loads(run_lazily(EDIT % LAZILY_PEER, json.dumps(start)))
            assert edited["text"] == "ello dear world"
            body.insert(11, "!")  # concurrently, on octosync's side
            body.delete(6, 1)
            await bridge.synced(TIMEOUT)
            state = bridge.cells.state
            for rest, data in entries_of(edited["ops"], LAZILY_PEER):  # peer 9's own entries
                op = CrdtOp(node_of(NAME), state.stamp(), data, key=f"{NAME}/{rest}")
                bridge.cells.merge([op])
                bridge._local(op)
            await bridge.synced(TIMEOUT)
            assert not bridge.errors  # the server took them as peer 9's entries
            await ours.wait_until(lambda: "dear" in body.value, TIMEOUT)
            merged = body.value
            await bridge.wait_until(lambda: bridge.text(NAME).value == merged, TIMEOUT)
            back = json.loads(
                run_lazily(MERGE % LAZILY_PEER, json.dumps([edited["ops"], text_ops(ours)]))
            )
            assert back == merged
            assert merged == "ello dear orld!"
