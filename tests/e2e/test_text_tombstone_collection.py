"""Collected text tombstones over a real server: two writers typing and deleting in one text
for many rounds leave entries that hold the text and the deletions still named, not every
character ever typed; a late joiner, and a restart after ``kill -9`` (journal replay), give
the same text and the same compacted entries; octosync.js (under Node) reports what it has
seen and takes the compaction like the Python client."""

from __future__ import annotations

import json
from pathlib import Path

from octosync.client.shared import SharedDocument
from octosync.crdt.shared import SharedState
from tests.e2e.helpers import TIMEOUT, spawn_server
from tests.e2e.test_shared_lists import run_node

ROUNDS = 40
LINE = "the quick brown fox jumps over the lazy dog. "


def typed(doc: SharedDocument) -> int:
    """Characters the text's run entries hold (deleted ones included)."""
    total = 0
    for op in doc.cells.state.replica.ops():
        if "/tx/" in (op.key or "") and isinstance(op.state, bytes):
            total += sum(len(run[1]) for run in json.loads(op.state))
    return total


def tombstones(doc: SharedDocument) -> int:
    return doc.cells.state.text_of("notes").crdt.tombstones()


async def test_a_long_edited_text_stays_bounded_and_survives_restart(tmp_path: Path) -> None:
    async with spawn_server(tmp_path) as srv:
        ann = SharedDocument(srv.url, "doc", report_every=0.05)
        bob = SharedDocument(srv.url, "doc", report_every=0.05)
        async with ann, bob:
            for i in range(ROUNDS):  # ann types a line at the end, bob deletes the first one
                notes = ann.text("notes")
                notes.insert(len(notes.value), f"{i:02} {LINE}")
                await ann.synced(TIMEOUT)
                want = f"{i:02} {LINE}"
                await bob.wait_until(lambda w=want: bob.text("notes").value.endswith(w), TIMEOUT)
                if i >= 2:
                    bob.text("notes").delete(0, len(want))
                await bob.synced(TIMEOUT)
            final = bob.text("notes").value
            await ann.wait_until(lambda: ann.text("notes").value == final, TIMEOUT)
            # once both writers have reported seeing every deletion, the server compacts the
            # chunks the writers have left: what stays is the text, plus at most each
            # writer's open chunk of 64 clocks
            written = ROUNDS * len(f"00 {LINE}")
            await ann.wait_until(lambda: typed(ann) <= len(final) + 64, TIMEOUT)
            await bob.wait_until(lambda: typed(bob) <= len(final) + 64, TIMEOUT)
            assert ann.text("notes").value == bob.text("notes").value == final
            assert tombstones(ann) <= 64
            assert tombstones(bob) <= 64
        assert len(final) == 2 * len(f"00 {LINE}")
        assert written > 10 * len(final)
        late = SharedDocument(srv.url, "doc")
        async with late:
            await late.synced(TIMEOUT)
            held = late.cells.state.replica.ops()
            assert late.text("notes").value == final
            assert typed(late) <= len(final) + 64
        srv.proc.kill()  # kill -9: the journal is all a restart has
        srv.proc.wait()
    async with spawn_server(tmp_path) as again:
        fresh = SharedDocument(again.url, "doc", report_every=0.05)
        async with fresh:
            await fresh.synced(TIMEOUT)
            assert fresh.text("notes").value == final
            assert fresh.cells.state.replica.ops() == held
            fresh.text("notes").insert(0, "after the restart: ")  # the text takes edits still
            await fresh.synced(TIMEOUT)
        state = SharedState(99, lambda: 0)
        async with SharedDocument(again.url, "doc") as reader:
            await reader.synced(TIMEOUT)
            state.receive(reader.cells.state.replica.ops())
        assert str(state.text_of("notes")) == "after the restart: " + final


JS_WRITER = """
import {{ connect }} from {module};
const client = connect({url});
const doc = client.openDocument("mixed", {{ peer: 41, reportEvery: 50 }});
await doc.synced();
const notes = doc.text("notes");
const line = (i) => `${{String(i).padStart(2, "0")}} {line}`;
for (let i = 0; i < 30; i += 1) {{  // type a line at the end, drop the first but two
  notes.insert(notes.length, line(i));
  if (i >= 2) notes.delete(0, line(i).length);
  await doc.synced();
}}
const chars = (op) => JSON.parse(new TextDecoder().decode(op.bytes))
  .reduce((m, r) => m + [...r[1]].length, 0);
const typed = () => [...doc.entries.values()]
  .filter((op) => op.key.includes("/tx/"))
  .reduce((n, op) => n + chars(op), 0);
for (let i = 0; i < 400 && typed() > notes.length + 64; i += 1) {{
  await new Promise((r) => setTimeout(r, 50));
}}
const tombstones = doc.textEntries("notes").crdt.tombstones();
console.log(JSON.stringify({{ value: notes.value, typed: typed(), tombstones }}));
client.close();
process.exit(0);
"""


async def test_a_javascript_writer_reports_and_takes_the_compaction_too(tmp_path: Path) -> None:
    async with spawn_server(tmp_path) as srv:
        py = SharedDocument(srv.url, "mixed", report_every=0.05)
        async with py:
            await py.synced(TIMEOUT)
            js = await run_node(tmp_path, JS_WRITER, url=json.dumps(srv.url), line=LINE)
            want = f"28 {LINE}29 {LINE}"
            assert js["value"] == want
            # 30 lines typed: what the JavaScript replica holds is the text and its open chunk
            assert js["typed"] <= len(want) + 64
            assert js["tombstones"] <= 64
            await py.wait_until(lambda: py.text("notes").value == want, TIMEOUT)
            await py.wait_until(lambda: typed(py) <= len(want) + 64, TIMEOUT)
