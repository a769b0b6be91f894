"""The text CRDT: local edits against a plain list, and replicas exchanging their chunk
entries in any order, duplicated, stale or late, all ending with one text; every replica's
change events, applied to a plain string, give its text."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from octosync.crdt.text import MAX_HELD, Run, TextCrdt, TextEdit
from octosync.crdt.text_entries import SharedText
from octosync.errors import CrdtValueError, LimitExceeded

ALPHABET = st.text(alphabet="abcdefgh\u00e9\U0001f600", min_size=1, max_size=90)


def apply(text: str, edits: list[TextEdit]) -> str:
    for e in edits:
        assert 0 <= e.index <= len(text)
        assert e.index + e.delete <= len(text)
        text = text[: e.index] + e.insert + text[e.index + e.delete :]
    return text


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.booleans(), st.integers(0, 10_000), st.integers(0, 10_000), ALPHABET),
        max_size=60,
    ),
    st.sampled_from([1, 2, 64]),
)
def test_local_edits_match_a_plain_list(
    steps: list[tuple[bool, int, int, str]], block: int
) -> None:
    t = TextCrdt(1, block=block)
    model: list[str] = []
    for is_insert, a, b, s in steps:
        if is_insert or not model:
            i = a % (len(model) + 1)
            t.insert(i, s)
            model[i:i] = list(s)
        else:
            i = a % len(model)
            n = b % (len(model) - i + 1)
            t.delete(i, n)
            del model[i : i + n]
        assert len(t) == len(model)
    assert t.to_string() == "".join(model)


def test_bad_indexes_are_refused_naming_the_field() -> None:
    t = TextCrdt(1)
    t.insert(0, "abc")
    with pytest.raises(CrdtValueError) as err:
        t.insert(4, "x")
    assert err.value.path == "index"
    with pytest.raises(CrdtValueError) as err:
        t.delete(2, 2)
    assert err.value.path == "index"
    assert t.to_string() == "abc"


def test_concurrent_inserts_at_one_point_keep_both_in_one_order() -> None:
    a, b = SharedText(1), SharedText(2)
    for rest, state in a.insert(0, "XY"):
        b.receive(rest, state)
    wa, wb = a.insert(1, "a"), b.insert(1, "b")
    for rest, state in wb:
        a.receive(rest, state)
    for rest, state in wa:
        b.receive(rest, state)
    assert str(a) == str(b)
    assert sorted(str(a)) == sorted("XYab")
    assert str(a)[0] == "X"
    assert str(a)[-1] == "Y"


def test_a_run_whose_origin_has_not_come_is_held_then_placed() -> None:
    a, b = SharedText(1), SharedText(2)
    first = a.insert(0, "hello")
    second = a.insert(5, " world")
    for rest, state in second + first:  # the later chunk state first: same chunk, so whole
        b.receive(rest, state)
    assert str(b) == "hello world"
    c = TextCrdt(3)
    assert c.integrate(Run(1, 10, "x", (1, 5))) == []
    assert c.held == 1
    assert c.to_string() == ""
    assert c.integrate(Run(1, 1, "abcde", (0, 0))) == [
        TextEdit(0, 0, "abcde"),
        TextEdit(5, 0, "x"),
    ]
    assert c.held == 0


def test_held_characters_are_bounded() -> None:
    c = TextCrdt(3)
    c.integrate(Run(1, 100, "y" * (MAX_HELD - 10), (1, 99)))
    assert c.held == MAX_HELD - 10
    with pytest.raises(LimitExceeded) as err:
        c.integrate(Run(2, 5, "z" * 64, (1, 99)))
    assert err.value.path == "held"
    assert c.held == MAX_HELD - 10


PEERS = (1, 2, 3)


class Replicas(RuleBasedStateMachine):
    """Three replicas editing one text; every entry write goes on a wire from which any
    replica takes any version of any entry, in any order, any number of times (an old version
    after a newer one included). Once every replica got every entry's latest version, all
    hold one text, and each one's change events replay to its text."""

    def __init__(self) -> None:
        super().__init__()
        self.reps = {p: SharedText(p, block=2) for p in PEERS}
        self.mirror = dict.fromkeys(PEERS, "")
        self.wire: list[tuple[str, bytes]] = []  # every version ever written
        self.latest: dict[str, bytes] = {}
        self.inserted: dict[int, list[str]] = {p: [] for p in PEERS}

    def _write(self, writes: list[tuple[str, bytes]]) -> None:
        for rest, state in writes:
            self.wire.append((rest, state))
            self.latest[rest] = state

    @rule(peer=st.sampled_from(PEERS), at=st.integers(0, 1000), text=ALPHABET)
    def insert(self, peer: int, at: int, text: str) -> None:
        r = self.reps[peer]
        self._write(r.insert(at % (len(r.crdt) + 1), text))

    @rule(peer=st.sampled_from(PEERS), at=st.integers(0, 1000), n=st.integers(1, 20))
    def delete(self, peer: int, at: int, n: int) -> None:
        r = self.reps[peer]
        if len(r.crdt):
            i = at % len(r.crdt)
            self._write(r.delete(i, min(n, len(r.crdt) - i)))

    @precondition(lambda self: self.wire)
    @rule(peer=st.sampled_from(PEERS), picks=st.lists(st.integers(0, 10_000), max_size=8))
    def deliver_some(self, peer: int, picks: list[int]) -> None:
        for i in picks:
            rest, state = self.wire[i % len(self.wire)]
            self.reps[peer].receive(rest, state)

    @rule()
    def deliver_everything(self) -> None:
        for r in self.reps.values():
            for rest, state in reversed(list(self.latest.items())):
                r.receive(rest, state)
        texts = {str(r) for r in self.reps.values()}
        assert len(texts) == 1, texts
        # nothing lost, nothing doubled: every character written and not deleted, once
        written: dict[tuple[int, int], str] = {}
        deleted: set[tuple[int, int]] = set()
        for rest, state in self.latest.items():
            tag, peer, _ = rest.split("/")
            for row in json.loads(state):
                if tag == "tx":
                    for i, ch in enumerate(row[1]):
                        written[(int(peer), row[0] + i)] = ch
                else:
                    deleted.update((row[0], c) for c in range(row[1], row[1] + row[2]))
        kept = sorted(ch for at, ch in written.items() if at not in deleted)
        assert sorted(texts.pop()) == kept

    @invariant()
    def events_replay_to_the_text(self) -> None:
        for p, r in self.reps.items():
            self.mirror[p] = apply(self.mirror[p], r.take_edits())
            assert self.mirror[p] == str(r)


TestReplicas = Replicas.TestCase
TestReplicas.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(PEERS), st.booleans(), st.integers(0, 500), ALPHABET, st.booleans()
        ),
        min_size=1,
        max_size=40,
    ),
    st.randoms(use_true_random=False),
    st.integers(0, 5),
)
def test_a_late_joiner_taking_a_batch_reads_what_replicas_read(
    steps: list[tuple[int, bool, int, str, bool]], rnd: Any, drop: int
) -> None:
    """Replicas edit (and sometimes sync); a fresh replica then gets every entry in one
    shuffled batch, some of it held back and sent after (origins missing from the batch, so
    runs wait), and reads what a replica that took the entries one by one reads."""
    reps = {p: SharedText(p) for p in PEERS}
    latest: dict[str, bytes] = {}
    for peer, is_insert, at, text, sync in steps:
        r = reps[peer]
        if is_insert or not len(r.crdt):
            writes = r.insert(at % (len(r.crdt) + 1), text)
        else:
            i = at % len(r.crdt)
            writes = r.delete(i, min(len(text), len(r.crdt) - i))
        latest.update(writes)
        if sync:
            for other in reps.values():
                for rest, state in writes:
                    other.receive(rest, state)
    one_by_one = SharedText(50)
    for rest, state in latest.items():
        one_by_one.receive(rest, state)
    entries = list(latest.items())
    rnd.shuffle(entries)
    joiner = SharedText(51)
    later, now = entries[:drop], entries[drop:]
    joiner.receive_many(now)
    joiner.receive_many(later)
    assert str(joiner) == str(one_by_one)
    assert joiner.crdt.held == 0
    assert apply("", joiner.take_edits()) == str(joiner)
