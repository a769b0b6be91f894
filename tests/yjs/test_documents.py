"""The document core: checks before anything changes, commit applies and fans out, a late
joiner's step 2 is the whole document as one update."""

from __future__ import annotations

from typing import Any

import pytest
from pycrdt import Doc, Text

from octosync.errors import MalformedYjsMessage, ReadOnlyDocument, YjsUpdateTooLarge
from octosync.yjs import messages as m
from octosync.yjs.documents import Limits, YjsDocuments


def edit(text: str, doc: Doc[Any] | None = None) -> bytes:
    doc = doc if doc is not None else Doc()
    before = doc.get_state()
    doc.get("text", type=Text).insert(0, text)
    update: bytes = doc.get_update(before)
    return update


def content(core: YjsDocuments, name: str) -> str:
    return str(core.document(name).doc.get("text", type=Text))


def test_an_update_changes_the_document_only_when_committed() -> None:
    core = YjsDocuments()
    core.join(1, "d", b"", can_write=True)
    core.join(2, "d", b"\x01d", can_write=False)
    checked = core.check(1, "d", edit("hello"))
    assert checked is not None
    assert content(core, "d") == ""  # checked, not yet journaled
    outs = core.commit(checked)
    assert content(core, "d") == "hello"
    assert [(o.conns, m.decode_y_websocket(o.body)) for o in outs] == [
        ((2,), m.SyncUpdate(checked.update))
    ]


def test_refusals_change_nothing() -> None:
    core = YjsDocuments(Limits(max_update_bytes=64))
    core.join(1, "d", b"", can_write=True)
    core.join(2, "d", b"", can_write=False)
    with pytest.raises(ReadOnlyDocument):
        core.check(2, "d", edit("x"))
    assert core.check(2, "d", m.EMPTY_UPDATE) is None  # a reader's empty step 2 is fine
    with pytest.raises(YjsUpdateTooLarge):
        core.check(1, "d", edit("x" * 100))
    for bad in (b"", b"\x01", b"\x05\x01\x02", edit("abc")[:-3]):
        with pytest.raises(MalformedYjsMessage):
            core.check(1, "d", bad)
    huge = m.var_uint(2**28)  # Yrs would size a table for 2^28 clients before failing
    for bad in (huge, huge + b"\x00" * 40):
        with pytest.raises(MalformedYjsMessage, match="announced"):  # refused before pycrdt
            core.check(1, "d", bad)
    assert core.document("d").doc.get_state() == b"\x00"


def test_a_late_joiner_gets_the_whole_document_as_one_update() -> None:
    core = YjsDocuments()
    core.join(1, "d", b"", can_write=True)
    writer: Doc[Any] = Doc()
    for word in ("one ", "two ", "three "):
        checked = core.check(1, "d", edit(word, writer))
        assert checked is not None
        core.commit(checked)
    answer = m.decode_y_websocket(core.answer_step1("d", b"\x00"))
    assert isinstance(answer, m.SyncStep2)
    joiner: Doc[Any] = Doc()
    joiner.apply_update(answer.update)
    assert str(joiner.get("text", type=Text)) == "three two one "
    with pytest.raises(MalformedYjsMessage):
        core.answer_step1("d", b"\xff\xff")
    for bad in (m.var_uint(2**28), m.var_uint(3) + b"\x01\x01"):
        with pytest.raises(MalformedYjsMessage, match="announced"):
            core.answer_step1("d", bad)


def test_leaving_sends_the_awareness_removal_to_the_others() -> None:
    from octosync.yjs.awareness import Entry, encode_entries

    core = YjsDocuments()
    core.join(1, "d", b"", can_write=True)
    core.join(2, "d", b"", can_write=True)
    assert core.awareness(1, "d", encode_entries([Entry(7, 3, '{"u":1}')]))[0].conns == (2,)
    (out,) = core.leave(1, "d")
    assert out.conns == (2,)
    assert out.body == m.awareness(encode_entries([Entry(7, 4, "null")]))
    assert core.awareness_states("d") is None
