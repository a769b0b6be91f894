"""Collected list tombstones over a real server: two writers editing one list for many rounds
leave a document whose size follows its live elements, not every element ever deleted, and a
restart (journal replay) gives the same list without bringing a tombstone back; octosync.js
(under Node) reports what it has seen and drops what was collected like the Python client."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from octosync.client.shared import SharedDocument
from octosync.errors import ElementCollected
from tests.e2e.helpers import TIMEOUT, spawn_server
from tests.e2e.test_shared_lists import run_node

ROUNDS = 60


def removals(doc: SharedDocument) -> int:
    return sum(1 for op in doc.cells.state.replica.ops() if "/ld/" in (op.key or ""))


async def test_a_long_edited_list_stays_bounded_and_survives_restart(tmp_path: Path) -> None:
    async with spawn_server(tmp_path) as srv:
        ann = SharedDocument(srv.url, "doc", report_every=0.05)
        bob = SharedDocument(srv.url, "doc", report_every=0.05)
        async with ann, bob:
            for i in range(ROUNDS):  # each round: ann adds two, bob removes the oldest two
                ann.list("todo").push(f"a{i}")
                ann.list("todo").push(f"b{i}")
                await ann.synced(TIMEOUT)
                await bob.wait_until(lambda i=i: f"b{i}" in bob.list("todo").value, TIMEOUT)
                if len(bob.list("todo").value) > 2:
                    bob.list("todo").delete(0)
                    bob.list("todo").delete(0)
                await bob.synced(TIMEOUT)
            final = bob.list("todo").value
            await ann.wait_until(lambda: ann.list("todo").value == final, TIMEOUT)
            # every removal seen by both writers: the server collects them all
            await ann.wait_until(lambda: removals(ann) == 0, TIMEOUT)
            await bob.wait_until(lambda: removals(bob) == 0, TIMEOUT)
            assert ann.list("todo").value == bob.list("todo").value == final
        late = SharedDocument(srv.url, "doc")
        async with late:
            await late.synced(TIMEOUT)
            held = late.cells.state.replica.ops()
            assert late.list("todo").value == final
        # 2 * ROUNDS elements were inserted (6 * ROUNDS entries kept without collection): what
        # the server holds is the live elements' entries and the watermark
        assert len(final) == 2
        assert len(held) == 2 * len(final) + 1
        assert removals(late) == 0
        srv.proc.kill()  # kill -9: the journal is all a restart has
        srv.proc.wait()
    async with spawn_server(tmp_path) as again:
        fresh = SharedDocument(again.url, "doc")
        async with fresh:
            await fresh.synced(TIMEOUT)
            assert fresh.list("todo").value == final
            assert fresh.cells.state.replica.ops() == held  # (node, key) order


JS_WRITER = """
import {{ connect }} from {module};
const client = connect({url});
const doc = client.openDocument("mixed", {{ peer: 41, reportEvery: 50 }});
await doc.synced();
const list = doc.list("todo");
for (let i = 0; i < 40; i += 1) list.push(`js${{i}}`);
await doc.synced();
for (let i = 0; i < 39; i += 1) list.delete(list.value.indexOf(`js${{i}}`));
await doc.synced();
const removals = () => [...doc.entries.values()].filter((op) => op.key.includes("/ld/"));
for (let i = 0; i < 400 && removals().length; i += 1) await new Promise((r) => setTimeout(r, 50));
const removed = removals().length;
console.log(JSON.stringify({{ value: list.value, entries: doc.entries.size, removals: removed }}));
client.close();
process.exit(0);
"""


async def test_a_javascript_writer_reports_and_collects_too(tmp_path: Path) -> None:
    async with spawn_server(tmp_path) as srv:
        py = SharedDocument(srv.url, "mixed", report_every=0.05)
        async with py:
            await py.synced(TIMEOUT)
            py.list("todo").push("py")
            await py.synced(TIMEOUT)
            # the JavaScript writer is a member: nothing it has not seen goes, and its own
            # reports are what let its 39 deletions go
            js = await run_node(tmp_path, JS_WRITER, url=json.dumps(srv.url))
            assert js["removals"] == 0
            assert sorted(js["value"]) == ["js39", "py"]
            assert js["entries"] == 2 * 2 + 1  # two live elements and the watermark
            await py.wait_until(lambda: removals(py) == 0, TIMEOUT)
            assert sorted(py.list("todo").value) == ["js39", "py"]


async def test_a_writer_back_after_the_bound_drops_its_edit_of_a_collected_element(
    tmp_path: Path,
) -> None:
    config = tmp_path / "octosync.toml"
    config.write_text("[server]\nplane_member_away = 1\n")
    data = tmp_path / "data"
    async with spawn_server(data, "--config", str(config)) as srv:
        ann = SharedDocument(srv.url, "away", report_every=0.05)
        bob = SharedDocument(srv.url, "away", report_every=0.05)
        async with ann:
            async with bob:
                bob.list("todo").push("milk")
                await bob.synced(TIMEOUT)
                await ann.wait_until(lambda: ann.list("todo").value == ("milk",), TIMEOUT)
            ann.list("todo").delete(0)  # bob is gone: it never sees milk go
            await ann.synced(TIMEOUT)
            assert removals(ann) == 1  # bob has not seen it: kept
            await asyncio.sleep(1.5)  # bob away past plane_member_away
            ann.list("todo").push("eggs")  # a report after the bound: collected now
            await ann.wait_until(lambda: removals(ann) == 0, TIMEOUT)
            bob.list("todo").set(0, "oat milk")  # offline, on the element ann removed
            assert bob.pending
            async with bob:
                await bob.synced(TIMEOUT)  # its edit dropped, not pending forever
                assert bob.list("todo").value == ann.list("todo").value == ("eggs",)
                # told why (and, if its resend beat the document, the server's refusal too)
                assert ElementCollected in {type(e) for e in bob.errors}
                assert {type(e) for e in bob.errors} == {ElementCollected}
                assert removals(bob) == 0
