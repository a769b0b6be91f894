"""Real editing traces through the text CRDT: the Automerge paper typed by one writer ends at
its final text, and two authors' concurrent edits, each replayed on the version it was made
on and merged in any order, end at the trace's final text on every replica."""

from __future__ import annotations

import pytest

from octosync.crdt.replicated import Replicated
from octosync.crdt.shared import SharedState
from octosync.crdt.text import TextCrdt, TextEdit
from octosync.crdt.text_entries import SharedText
from octosync.graph import Context
from tests.conftest import trace_file
from tests.text_traces import causal_writes, load, patches

pytestmark = pytest.mark.slow


def test_the_automerge_paper_typed_into_one_text_ends_at_its_content() -> None:
    trace = load(trace_file("automerge-paper.json.gz"))
    edits = patches(trace)
    assert len(edits) == 259_778
    text = TextCrdt(1)
    for pos, deleted, inserted in edits:
        if deleted:
            text.delete(pos, deleted)
        if inserted:
            text.insert(pos, inserted)
    assert text.to_string() == trace["endContent"]
    assert text.spans() < len(edits) // 2  # runs, not one object per character


def test_the_automerge_paper_reaches_a_late_joiner_as_a_few_thousand_entries() -> None:
    trace = load(trace_file("automerge-paper.json.gz"))
    writer = SharedText(1)
    writer.listening = False
    entries: dict[str, bytes] = {}
    for pos, deleted, inserted in patches(trace):
        for rest, state in (writer.delete(pos, deleted) if deleted else []) + (
            writer.insert(pos, inserted) if inserted else []
        ):
            entries[rest] = state
    assert len(entries) < 10_000
    joiner = SharedText(2)
    for rest, state in sorted(entries.items()):  # the plane's key order, not causal order
        joiner.receive(rest, state)
    assert str(joiner) == trace["endContent"]
    assert joiner.crdt.held == 0
    framed = SharedText(3)  # as the server sends them: frames of 1,000 entries in key order
    ordered = sorted(entries.items())
    for i in range(0, len(ordered), 1_000):
        framed.receive_many(ordered[i : i + 1_000])
    assert str(framed) == trace["endContent"]
    assert framed.crdt.held == 0


def test_two_authors_concurrent_edits_converge_to_the_traces_content() -> None:
    trace = load(trace_file("friendsforever.json.gz"))
    writes = causal_writes(trace)
    latest: dict[str, bytes] = {}
    for _, ws in writes:
        latest.update(ws)
    forward, backward = SharedText(7), SharedText(8)
    for _, ws in writes:
        for rest, state in ws:
            forward.receive(rest, state)
    for rest, state in sorted(latest.items(), reverse=True):
        backward.receive(rest, state)
    assert str(forward) == trace["endContent"]
    assert str(backward) == trace["endContent"]


def test_the_automerge_paper_typed_through_a_documents_text_value() -> None:
    """The same trace through the client's layer (``Replicated``: the value a Python client's
    ``doc.text`` is), with an editor's mirror kept from the change events alone."""
    trace = load(trace_file("automerge-paper.json.gz"))
    doc = Replicated(Context(), SharedState(1, lambda: 1))
    body = doc.text("paper")
    edits_seen = [0]

    def follow(edits: list[TextEdit]) -> None:
        edits_seen[0] += len(edits)

    body.on_change(follow)
    for pos, deleted, inserted in patches(trace):
        if deleted:
            body.delete(pos, deleted)
        if inserted:
            body.insert(pos, inserted)
        if len(doc.outgoing) > 1_000:
            doc.take_outgoing()  # what a client sends; the trace goes on
    assert body.value == trace["endContent"]
    assert edits_seen[0] == len(patches(trace))
