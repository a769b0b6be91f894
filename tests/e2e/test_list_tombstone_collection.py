"""Collected list tombstones over a real server: two writers editing one list for many rounds
leave a document whose size follows its live elements, not every element ever deleted, and a
restart (journal replay) gives the same list without bringing a tombstone back."""

from __future__ import annotations

from pathlib import Path

from octosync.client.shared import SharedDocument
from tests.e2e.helpers import TIMEOUT, spawn_server

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
