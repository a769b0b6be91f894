"""Shared documents reach the pipeline: a real ``octosync serve`` process, three Python clients
making a few hundred counter, map and register edits at once, then ``report``, ``compact`` and
``verify`` in a real SparkSession on the journal the server wrote.

The merged values the pipeline reports must equal the document a fresh client gets from the
server; the edit counts must equal an independent count over the journal's ``PlaneOps``
records in plain Python; and a compaction of the documents' history in the journal (what the
maintenance round does) must change neither.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import octosync
from octosync.pipeline.jobs import compact, report, verify
from octosync.store.journal import Journal
from octosync.store.plane_compaction import compact_stream
from octosync.store.records import KIND_PLANE, PlaneOps
from tests.e2e.helpers import spawn_server

pytestmark = pytest.mark.spark

ROUNDS = 100
DOCS = ("board", "todo")


async def _write(url: str, writer: int) -> None:
    """One client's edits to both documents, interleaved with the other clients'."""
    async with (
        octosync.open_document(url, "board") as board,
        octosync.open_document(url, "todo") as todo,
    ):
        clicks, title = board.counter("clicks"), board.register("title")
        done, text = todo.map("done"), todo.map("text")
        for i in range(ROUNDS):
            clicks.add(1 if i % 5 else -1)
            done.set(f"item{i % 7}", (i + writer) % 2 == 0)
            if i % 10 == writer:
                text.set(f"item{i % 7}", f"written by {writer} at {i}")
                title.set(f"title {writer}.{i}")
            if i % 3 == 0:
                await asyncio.sleep(0.001)  # let frames go out between edits
        await board.synced()
        await todo.synced()


async def _server_document(url: str) -> list[tuple[str, str, str, Any]]:
    """What the server holds, as a client that joins afterwards sees it."""
    out: list[tuple[str, str, str, Any]] = []
    async with (
        octosync.open_document(url, "board") as board,
        octosync.open_document(url, "todo") as todo,
    ):
        clicks, title = board.counter("clicks"), board.register("title")
        done, text = todo.map("done"), todo.map("text")
        await board.wait_until(lambda: title.value is not None)
        await todo.wait_until(lambda: len(done.value) == 7 and len(text.value) == 7)
        out += [("board", "clicks", "pn", clicks.value), ("board", "title", "lww", title.value)]
        out += [("todo", "done", "map", done.value), ("todo", "text", "map", text.value)]
    return sorted(out, key=lambda v: v[:3])


def _journal_edits(data: Path) -> tuple[Counter[str], Counter[tuple[str, int]]]:
    """Distinct plane ops per document and per (document, writer), read in plain Python."""
    seen: set[tuple[Any, ...]] = set()
    with Journal(data, readonly=True) as journal:
        for entry in journal.read():
            if entry.kind != KIND_PLANE:
                continue
            assert isinstance(entry.record, PlaneOps)
            for op in entry.record.ops:
                stamp = (op.stamp.wall_time, op.stamp.logical, op.stamp.peer)
                seen.add((entry.record.stream, op.slot_id, op.key, stamp, op.state))
    per_doc = Counter(s[0] for s in seen)
    per_writer = Counter((s[0], s[3][2]) for s in seen)
    return per_doc, per_writer


def test_report_compact_and_verify_see_shared_documents(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "var"

    async def scenario() -> list[tuple[str, str, str, Any]]:
        async with spawn_server(data) as server:
            await asyncio.gather(*(_write(server.url, w) for w in range(3)))
            return await _server_document(server.url)

    expected = asyncio.run(scenario())
    assert expected[0] == ("board", "clicks", "pn", 3 * (ROUNDS - 2 * ROUNDS // 5))
    per_doc, per_writer = _journal_edits(data)
    assert sum(per_doc.values()) >= 300  # a few hundred edits reached the journal

    first = report.run(spark, data, tmp_path / "report")
    assert first.documents == list(DOCS)
    assert first.document_edits == sum(per_doc.values())
    assert [tuple(v) for v in first.document_values] == expected
    assert "edits_per_second_by_document.png" in first.charts
    page = Path(first.index).read_text()
    assert "No shared-document edits" not in page
    assert f"{first.document_edits} edits of 2 shared documents" in page
    rows = (tmp_path / "report" / "document_writers.csv").read_text().splitlines()[1:]
    got = {(d, int(w)): int(n) for d, w, n in (r.split(",") for r in rows)}
    assert got == dict(per_writer)
    assert len({w for _, w in got}) == 6  # three clients, one replica per document each

    checked = verify.run(spark, data)
    assert checked.ok, checked.render()
    assert [(d.document, d.edits) for d in checked.documents] == sorted(per_doc.items())

    with Journal(data) as journal:  # what the maintenance round does to a busy document
        for doc in DOCS:
            assert compact_stream(journal, doc) > 1
    again = report.run(spark, data, tmp_path / "report-after")
    assert again.document_edits == first.document_edits  # replacement records counted once
    assert again.document_values == first.document_values

    compacted = compact.run(spark, data, tmp_path / "compacted")
    meta = json.loads((Path(compacted.out) / "compaction.json").read_text())
    assert meta["documents"] == {doc: per_doc_entries(data, doc) for doc in DOCS}
    values = json.loads((Path(compacted.out) / "documents.json").read_text())
    assert [(d, n, k, values[d][n][k]) for d, n, k, _ in expected] == expected
    winners = pq.read_table(Path(compacted.out) / "documents" / "plane").num_rows
    assert winners == sum(meta["documents"].values())


def per_doc_entries(data: Path, doc: str) -> int:
    """Entries of ``doc`` after every op is merged, by the replica's own merge."""
    from octosync.crdt.plane import PlaneReplica

    replica = PlaneReplica()
    with Journal(data, readonly=True) as journal:
        for entry in journal.read():
            if entry.kind == KIND_PLANE:
                assert isinstance(entry.record, PlaneOps)
                if entry.record.stream == doc:
                    replica.merge(entry.record.ops)
    return len(replica)


def test_verify_names_a_counter_that_went_back_and_an_entry_written_by_another(
    spark: Any, tmp_path: Path
) -> None:
    from octosync.crdt.shared import node_of
    from octosync.ipc.messages import CrdtOp, WireStamp

    def op(key: str, wall: int, peer: int, state: bytes) -> CrdtOp:
        name = key.split("/")[0]
        return CrdtOp(node_of(name), WireStamp(wall_time=wall, logical=0, peer=peer), state, key)

    with Journal(tmp_path) as journal:
        journal.append(
            [
                PlaneOps("d", (op("n/pn/5", 1, 5, b"[3,0]"),)),
                PlaneOps("d", (op("n/pn/5", 2, 5, b"[2,0]"),)),  # one increment lost
                PlaneOps("d", (op("n/pn/5", 3, 5, b"[4,1]"),)),
                PlaneOps("d", (op("n/pn/6", 4, 7, b"[1,0]"),)),  # 7 wrote 6's tally
                PlaneOps("ok", (op("t/lww", 1, 9, b'"x"'),)),
            ]
        )
    checked = verify.run(spark, tmp_path)
    assert not checked.ok
    assert [(p.stream, p.seq, p.problem) for p in checked.problems] == [
        ("d", 2, "counter_regressed"),
        ("d", 4, "foreign_entry"),
    ]
    assert [(d.document, d.edits, d.writers, d.problems) for d in checked.documents] == [
        ("d", 4, 2, 2),
        ("ok", 1, 1, 0),
    ]
