"""The entry layout's rules: which peer owns an entry, what state each kind holds, which
entries only grow; and a state machine of writers forging each other's entries through the
server core."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from octosync.bounds import MAX_SAFE_INTEGER
from octosync.crdt.entries import check_op, layout_of, node_of, parse_peer
from octosync.crdt.shared import SharedState
from octosync.errors import CrdtValueError, Forbidden, OctosyncError
from octosync.hub.crdt_streams import CrdtStreams
from octosync.hub.types import AllowAll
from octosync.ipc.messages import CrdtOp, CrdtSync, WireStamp

NOW = 1_000_000
_JSON = msgspec.json.Encoder()


def entry(key: str, state: object, peer: int = 7, wall: int = NOW, raw: bool = False) -> CrdtOp:
    name = key.split("/", 1)[0]
    body = state if raw else _JSON.encode(state)
    assert isinstance(body, bytes)
    return CrdtOp(slot_id=node_of(name), stamp=WireStamp(wall, 0, peer), state=body, key=key)


def refused(op: CrdtOp, writer: int = 7, held: CrdtOp | None = None) -> OctosyncError:
    with pytest.raises(OctosyncError) as err:
        check_op(op, writer, held, "ops[0]")
    return err.value


def test_a_counter_entry_belongs_to_the_peer_it_names() -> None:
    check_op(entry("clicks/pn/7", [3, 1]), 7, None, "ops[0]")
    err = refused(entry("clicks/pn/8", [0, 0]))
    assert isinstance(err, Forbidden)
    assert err.path == "ops[0].key"
    assert "peer 8" in str(err)


def test_a_multi_value_entry_belongs_to_the_peer_it_names() -> None:
    check_op(entry("owner/mv/7", ["ann", {"7": 1}]), 7, None, "ops[0]")
    assert isinstance(refused(entry("owner/mv/9", ["eve", {"9": 1}])), Forbidden)


@pytest.mark.parametrize(
    ("key", "state", "path"),
    [
        ("clicks/pn/7", b"\xff{not json", "ops[0].state"),
        ("clicks/pn/7", [1], "ops[0].state"),
        ("clicks/pn/7", [1, -1], "ops[0].state"),
        ("clicks/pn/7", [1, 2.5], "ops[0].state"),
        ("clicks/pn/7", [True, 0], "ops[0].state"),
        ("clicks/pn/7", [MAX_SAFE_INTEGER + 1, 0], "ops[0].state"),
        ("clicks/pn/07", [1, 0], "ops[0].key"),
        ("clicks/pn/+7", [1, 0], "ops[0].key"),
        ("clicks/pn/", [1, 0], "ops[0].key"),
        ("clicks/pn", [1, 0], "ops[0].key"),
        ("clicks/pn/7/x", [1, 0], "ops[0].key"),
        ("owner/mv/7", ["x"], "ops[0].state"),
        ("owner/mv/7", ["x", {"seven": 1}], "ops[0].state"),
        ("owner/mv/7", ["x", {"7": -1}], "ops[0].state"),
        ("todo/map/milk", [1, 2], "ops[0].state"),
        ("todo/map/milk", {"v": 1}, "ops[0].state"),
        ("todo/map", [1], "ops[0].key"),
        ("title/lww", b"{", "ops[0].state"),
        ("title/lww/extra", "x", "ops[0].key"),
    ],
)
def test_malformed_entries_are_refused_naming_the_field(key: str, state: object, path: str) -> None:
    raw = isinstance(state, bytes)
    err = refused(entry(key, state, raw=raw))
    assert isinstance(err, CrdtValueError)
    assert err.path == path


def test_a_counter_entry_never_goes_down_but_an_old_resend_passes() -> None:
    held = entry("clicks/pn/7", [5, 2], wall=NOW)
    check_op(entry("clicks/pn/7", [6, 2], wall=NOW + 1), 7, held, "ops[0]")
    err = refused(entry("clicks/pn/7", [0, 0], wall=NOW + 1), held=held)
    assert isinstance(err, CrdtValueError)
    assert err.path == "ops[0].state"
    assert "only grow" in str(err)
    err = refused(entry("clicks/pn/7", [9, 1], wall=NOW + 1), held=held)  # n went down
    assert isinstance(err, CrdtValueError)
    # an older op (a resend after a lost acknowledgement) replaces nothing: let through
    check_op(entry("clicks/pn/7", [1, 0], wall=NOW - 1), 7, held, "ops[0]")
    check_op(held, 7, held, "ops[0]")


def test_entries_outside_the_layout_are_opaque() -> None:
    opaque = [
        CrdtOp(slot_id=3, stamp=WireStamp(NOW, 0, 7), state=b"\xff", key=None),
        CrdtOp(slot_id=3, stamp=WireStamp(NOW, 0, 7), state=b"\xff", key="plain"),
        CrdtOp(slot_id=3, stamp=WireStamp(NOW, 0, 7), state=b"\xff", key="a/other/8"),
        # a counter-shaped key under another node id is not the document's counter
        CrdtOp(slot_id=node_of("x") ^ 1, stamp=WireStamp(NOW, 0, 7), state=b"", key="x/pn/8"),
    ]
    for op in opaque:
        assert layout_of(op) is None
        check_op(op, 7, None, "ops[0]")


@given(st.integers(min_value=1, max_value=MAX_SAFE_INTEGER))
def test_a_peer_segment_is_its_canonical_decimal(peer: int) -> None:
    assert parse_peer(str(peer)) == peer
    assert parse_peer("0" + str(peer)) is None
    assert parse_peer(f"{peer} ") is None


@given(st.text(max_size=20))
def test_a_peer_segment_parses_only_to_what_prints_back(segment: str) -> None:
    peer = parse_peer(segment)
    assert peer is None or (str(peer) == segment and 0 < peer <= MAX_SAFE_INTEGER)


@given(st.integers(0, 2**20), st.integers(0, 2**20), st.integers(0, 2**20), st.integers(0, 2**20))
def test_a_newer_counter_entry_passes_exactly_when_no_tally_went_down(
    p0: int, n0: int, p1: int, n1: int
) -> None:
    held = entry("c/pn/7", [p0, n0], wall=NOW)
    new = entry("c/pn/7", [p1, n1], wall=NOW + 1)
    grows = p1 >= p0 and n1 >= n0
    if grows:
        check_op(new, 7, held, "ops[0]")
    else:
        assert isinstance(refused(new, held=held), CrdtValueError)


# --- a state machine: writers forging each other's entries through the server core -----------

PEERS = (11, 12, 13)
STREAM = "doc"


class Forgers(RuleBasedStateMachine):
    """Each writer has its own peer id and sends frames mixing its own honest edits, other
    writers' entries and malformed states. No writer's counter or multi-value entry may ever
    change except by that writer's own op, and a refused frame changes nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.now = NOW
        self.core = CrdtStreams(lambda: self.now)
        self.writers = {p: SharedState(p, lambda: self.now) for p in PEERS}
        for conn, peer in enumerate(PEERS):
            self.core.join(conn, STREAM, peer, AllowAll())
        self.accepted: dict[str, CrdtOp] = {}  # entry key -> the op that last changed it

    def _send(self, writer: int, ops: tuple[CrdtOp, ...]) -> bool:
        before = self.core.state_of(STREAM)
        try:
            checked = self.core.check(PEERS.index(writer), CrdtSync(ops=ops))
        except OctosyncError:
            assert self.core.state_of(STREAM) == before, "a refused frame changed the document"
            return False
        for op in self.core.commit(checked).fanout:
            self.accepted[op.key or ""] = op
        return True

    @rule(
        writer=st.sampled_from(PEERS),
        amount=st.integers(-3, 3),
        name=st.sampled_from(["clicks", "likes"]),
    )
    def honest_add(self, writer: int, amount: int, name: str) -> None:
        self.now += 1
        op = self.writers[writer].add(name, amount)
        assert self._send(writer, (op,)), "an honest edit was refused"

    @rule(writer=st.sampled_from(PEERS), value=st.integers(0, 5))
    def honest_multi(self, writer: int, value: int) -> None:
        self.now += 1
        assert self._send(writer, (self.writers[writer].set_multi("owner", value),))

    @rule(
        writer=st.sampled_from(PEERS),
        victim=st.sampled_from(PEERS),
        tally=st.tuples(st.integers(0, 50), st.integers(0, 50)),
        kind=st.sampled_from(["pn", "mv"]),
        honest_first=st.booleans(),
        logical=st.integers(0, 3),
    )
    def forge(
        self,
        writer: int,
        victim: int,
        tally: tuple[int, int],
        kind: str,
        honest_first: bool,
        logical: int,
    ) -> None:
        """A frame that writes another writer's entry (or shrinks its own), with the writer's
        own honest stamp, maybe behind an honest edit of its own."""
        self.now += 1
        name = "clicks" if kind == "pn" else "owner"
        state = list(tally) if kind == "pn" else [tally[0], {str(victim): tally[1]}]
        forged = CrdtOp(
            slot_id=node_of(name),
            stamp=WireStamp(self.now, logical, writer),
            state=_JSON.encode(state),
            key=f"{name}/{kind}/{victim}",
        )
        ops = (forged,)
        if honest_first:
            ops = (self.writers[writer].add("likes", 1), forged)
        held = self.core.streams[STREAM].replica.get(node_of(name), f"{name}/pn/{writer}")
        took = self._send(writer, ops)
        if victim != writer:
            assert not took, "a writer wrote another writer's entry"
        elif kind == "pn":  # its own counter entry, newest stamp: taken only if nothing shrank
            p, n = (0, 0) if held is None else msgspec.json.decode(held.state)  # type: ignore[arg-type]
            assert took == (tally[0] >= p and tally[1] >= n), "a counter entry shrank"
        if took and honest_first:
            self.writers[writer].receive(ops[:1])
        elif honest_first:
            # the refused frame took the honest edit with it: undo it on the writer's replica
            self.writers[writer] = _rebuilt(writer, self.core.state_of(STREAM), lambda: self.now)
        if took:
            self.writers[writer].receive(ops)

    @rule(
        writer=st.sampled_from(PEERS),
        state=st.sampled_from([b"\xff{not json", b"[1]", b"[-1,0]", b'"x"', b"[1,2,3]"]),
    )
    def malformed_own_counter(self, writer: int, state: bytes) -> None:
        self.now += 1
        op = CrdtOp(
            slot_id=node_of("clicks"),
            stamp=WireStamp(self.now, 0, writer),
            state=state,
            key=f"clicks/pn/{writer}",
        )
        assert not self._send(writer, (op,)), "a malformed counter entry was accepted"

    @invariant()
    def every_owned_entry_was_written_by_its_owner(self) -> None:
        for op in self.core.state_of(STREAM):
            layout = layout_of(op)
            assert layout is not None
            if layout.kind.owner is not None:
                assert int(layout.rest[layout.kind.owner]) == op.stamp.peer

    @invariant()
    def the_counter_is_what_the_writers_added(self) -> None:
        reader = SharedState(99, lambda: self.now)
        reader.receive(self.core.state_of(STREAM))
        for name in ("clicks", "likes"):
            mine = sum(own_tally(w, name) for w in self.writers.values())
            assert reader.counter(name) == mine


def _rebuilt(peer: int, ops: tuple[CrdtOp, ...], clock: object) -> SharedState:
    state = SharedState(peer, clock)  # type: ignore[arg-type]
    state.receive(ops)
    return state


def own_tally(state: SharedState, name: str) -> int:
    """What one writer's replica holds of its own additions to ``name``."""
    op = state.replica.get(node_of(name), f"{name}/pn/{state.peer}")
    if op is None:
        return 0
    p, n = msgspec.json.decode(op.state)  # type: ignore[arg-type]
    return int(p - n)


Forgers.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestForgers = Forgers.TestCase


def test_text_chunks_belong_to_their_writer_and_only_grow() -> None:
    check_op(entry("body/tx/7/0", [[1, "ab", 0, 0], [5, "c", 7, 2]]), 7, None, "ops[0]")
    assert isinstance(refused(entry("body/tx/8/0", [[1, "ab", 0, 0]])), Forbidden)
    held = entry("body/tx/7/0", [[1, "ab", 0, 0]])
    check_op(entry("body/tx/7/0", [[1, "abc", 0, 0]], wall=NOW + 1), 7, held, "ops[0]")
    err = refused(entry("body/tx/7/0", [[1, "a", 0, 0]], wall=NOW + 1), held=held)
    assert (type(err), err.path) == (CrdtValueError, "ops[0].state")
    err = refused(entry("body/tx/7/0", [[1, "xb", 0, 0]], wall=NOW + 1), held=held)
    assert err.path == "ops[0].state"
    dels = entry("body/td/7/0", [[3, 1, 4]])
    check_op(entry("body/td/7/0", [[3, 1, 5], [9, 2, 1]], wall=NOW + 1), 7, dels, "ops[0]")
    err = refused(entry("body/td/7/0", [[3, 2, 3]], wall=NOW + 1), held=dels)
    assert err.path == "ops[0].state"


@pytest.mark.parametrize(
    ("key", "state", "path"),
    [
        ("body/tx/7/01", [[64, "a", 0, 0]], "ops[0].key"),
        ("body/tx/7/x", [[64, "a", 0, 0]], "ops[0].key"),
        ("body/tx/7", [[1, "a", 0, 0]], "ops[0].key"),
        ("body/tx/7/0", [], "ops[0].state"),
        ("body/tx/7/0", [[0, "a", 0, 0]], "ops[0].state[0]"),
        ("body/tx/7/0", [[63, "ab", 0, 0]], "ops[0].state[0]"),  # crosses into chunk 1
        ("body/tx/7/1", [[1, "a", 0, 0]], "ops[0].state[0]"),  # not chunk 1's clocks
        ("body/tx/7/0", [[5, "a", 3, 5]], "ops[0].state[0]"),  # origin not below the run
        ("body/tx/7/0", [[5, "a", 3, 1], [2, "b", 0, 0]], "ops[0].state[1]"),
        ("body/tx/7/0", [[1, "a", 0, 0], [2, "b", 7, 1]], "ops[0].state[1]"),  # not maximal
        ("body/tx/7/0", [[1, "", 0, 0]], "ops[0].state[0]"),
        ("body/td/7/0", [[7, 0, 1]], "ops[0].state[0]"),
        ("body/td/7/0", [[0, 1, 1]], "ops[0].state[0]"),
        ("body/td/7/0", [[7, 1, 1]] * 65, "ops[0].state"),
    ],
)
def test_malformed_text_entries_are_refused_naming_the_field(
    key: str, state: object, path: str
) -> None:
    err = refused(entry(key, state))
    assert isinstance(err, CrdtValueError)
    assert err.path == path


def test_a_frame_of_too_many_ops_is_refused_whole() -> None:
    from octosync.hub.crdt_streams import MAX_FRAME_OPS

    core = CrdtStreams(lambda: NOW)
    core.join(0, "doc", 7, AllowAll())
    ops = tuple(entry(f"k{i}/lww", i) for i in range(MAX_FRAME_OPS + 1))
    with pytest.raises(OctosyncError) as err:
        core.check(0, CrdtSync(ops=ops))
    assert err.value.path == "ops"
    core.check(0, CrdtSync(ops=ops[:MAX_FRAME_OPS]))
