"""The relay's notes as journal records: Preserves text, references hidden, the connection named
with the server run."""

from __future__ import annotations

from octosync.dataspace.values import Record, Symbol
from octosync.store.dataspace_hook import dataspace_records, value_text
from octosync.store.records import DataspaceEvent, decode_record
from octosync.syndicate.relay import Activity
from octosync.syndicate.values import Ref


def test_values_are_their_preserves_text_and_references_are_hidden() -> None:
    point = Record(Symbol("Point"), 1, 2.5, "a", b"x", [True, {"k": Ref(object())}])
    assert value_text(point) == '<Point 1 2.5 "a" #[eA==] [#t {"k": #:ref}]>'
    assert value_text(Symbol("bare")) == "bare"


def test_each_note_becomes_one_record_naming_run_and_connection() -> None:
    notes = [
        Activity("demo", "assert", 7, "Point", Record(Symbol("Point"), 1), 3),
        Activity("demo", "retract", 7, "Point", None, 3),
        Activity("demo", "message", 0, "", "hello", None),
    ]
    encoded = dataspace_records(notes, "19ab")
    assert [(e.kind, e.scope) for e in encoded] == [("dataspace", "demo")] * 3
    decoded = [decode_record(e.kind, e.body, seq=1) for e in encoded]
    assert decoded == [
        DataspaceEvent("demo", "assert", 7, "Point", "<Point 1>", "19ab.3"),
        DataspaceEvent("demo", "retract", 7, "Point", "", "19ab.3"),
        DataspaceEvent("demo", "message", 0, "", '"hello"', None),
    ]
