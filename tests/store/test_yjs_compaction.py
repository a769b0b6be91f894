"""Yjs documents in the journal: a maintenance round replaces a busy document's records by one
merged update, a restart applies it to the same document, and a trim never drops them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pycrdt import Doc, Map, Text

from octosync.store.journal import Journal
from octosync.store.records import KIND_YJS, YjsUpdate
from octosync.store.recovery import JournalState
from octosync.store.retention import JournalKeeper
from octosync.store.yjs_compaction import compact_document, restore_yjs
from octosync.yjs.documents import YjsDocuments


def updates(n: int, client: int) -> tuple[list[bytes], Doc[Any]]:
    doc: Doc[Any] = Doc(client_id=client)
    out = []
    for i in range(n):
        before = doc.get_state()
        doc.get("text", type=Text).insert(0, f"{i};")
        doc.get("map", type=Map)[f"k{i % 3}"] = i
        if i % 4 == 3:
            del doc.get("text", type=Text)[0]
        out.append(doc.get_update(before))
    return out, doc


def shown(doc: Doc[Any]) -> tuple[str, dict[str, Any]]:
    return str(doc.get("text", type=Text)), doc.get("map", type=Map).to_py()


def test_a_round_compacts_busy_documents_into_one_update(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    busy, busy_doc = updates(30, 1)
    quiet, quiet_doc = updates(3, 2)
    # out of order, with a gap filled only by a later record: merging keeps what is pending
    order = busy[5:] + busy[:5]
    journal.append([YjsUpdate("busy", u, "run.1") for u in order])
    journal.append([YjsUpdate("quiet", u, "run.2") for u in quiet])
    report = JournalKeeper(journal, JournalState(), plane_compact_records=10).round()
    assert report.plane_records_compacted == 30
    assert journal.count_scoped(KIND_YJS, "busy") == 1
    assert journal.count_scoped(KIND_YJS, "quiet") == 3
    documents = YjsDocuments()
    assert restore_yjs(journal, documents) == 2
    assert shown(documents.document("busy").doc) == shown(busy_doc)
    assert shown(documents.document("quiet").doc) == shown(quiet_doc)
    journal.close()


def test_a_trim_keeps_yjs_records(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    ups, doc = updates(5, 3)
    journal.append([YjsUpdate("d", u) for u in ups])
    latest = journal.latest_seq()
    journal.trim(latest + 1, exported_through=latest)
    documents = YjsDocuments()
    restore_yjs(journal, documents)
    assert shown(documents.document("d").doc) == shown(doc)
    journal.close()


def test_the_highest_cluster_position_is_restored_and_survives_compaction(tmp_path: Path) -> None:
    """A restarted node replays the cluster's Yjs op stream from the highest position its
    journal holds, before and after the records carrying it were merged into one."""
    journal = Journal(tmp_path)
    ups, _ = updates(6, 3)
    positions = [None, 7, None, 12, 9, None]
    journal.append([YjsUpdate("doc", u, None, p) for u, p in zip(ups, positions, strict=True)])
    documents = YjsDocuments()
    restore_yjs(journal, documents)
    assert documents.replica_position == 12
    assert compact_document(journal, "doc") == 6
    again = YjsDocuments()
    restore_yjs(journal, again)
    assert again.replica_position == 12
    journal.close()
