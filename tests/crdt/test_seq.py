"""Lists on the plane (the move-aware sequence): lazily-spec's convergence scenarios replayed as
data, positions and ids, the entry rules a server keeps, and a state machine of replicas
editing one list under reordered, duplicated and dropped-then-resent delivery."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from octosync.crdt.entries import check_op, node_of
from octosync.crdt.plane import PlaneReplica
from octosync.crdt.replicated import Replicated
from octosync.crdt.seq import (
    BASE,
    MAX_DIGITS,
    ListChange,
    between,
    diff,
    id_peer,
    mint_id,
    one_change,
    place,
)
from octosync.crdt.shared import SharedState
from octosync.errors import CrdtValueError, Forbidden, LimitExceeded, OctosyncError
from octosync.graph import Context
from octosync.ipc.messages import CrdtOp, WireStamp

_JSON = msgspec.json.Encoder()


# --- the conformance scenarios ------------------------------------------------------------


class Replay:
    """Runs one scenario of seqcrdt_convergence.json: replicas by name, the scenario's element
    ids mapped to the ids the inserting replica minted."""

    def __init__(self) -> None:
        self.replicas: dict[str, SharedState] = {}
        self.now: dict[str, int] = {}
        self.ids: dict[str, str] = {}

    def make(self, name: str, peer: int) -> SharedState:
        self.now[name] = 0
        state = SharedState(peer, lambda: self.now[name])
        self.replicas[name] = state
        return state

    def order(self, name: str) -> list[str]:
        back = {ours: theirs for theirs, ours in self.ids.items()}
        return [back[e.id] for e in self.replicas[name].list_elements("seq")]

    def index(self, name: str, element: str) -> int:
        return self.order(name).index(element)

    def op(self, on: str, step: dict[str, Any]) -> None:
        state = self.replicas[on]
        self.now[on] = step["now"]
        kind = step["op"]
        if kind in ("insert_back", "insert_front"):
            at = len(self.order(on)) if kind == "insert_back" else 0
            ops = state.list_insert("seq", at, step["value"])
            self.ids[step["id"]] = ops[0].key.split("/")[2]  # type: ignore[union-attr]
        elif kind == "move_after":
            source = self.index(on, step["id"])
            rest = [e for e in self.order(on) if e != step["id"]]
            state.list_move("seq", source, rest.index(step["anchor"]) + 1)
        elif kind == "set_value":
            state.list_set("seq", self.index(on, step["id"]), step["value"])
        elif kind == "remove":
            state.list_delete("seq", self.index(on, step["id"]))
        else:
            raise AssertionError(f"unknown step {kind}")

    def copy(self, name: str, source: str, peer: int) -> None:
        """A fork (new peer) or a clone (same peer): the source's elements and its clock's
        causal position, which a replica takes from every stamp it receives."""
        made = self.make(name, peer)
        made.receive(self.replicas[source].replica.ops())
        self.now[name] = self.now[source]

    def step(self, step: dict[str, Any]) -> None:
        if "fork" in step:
            self.copy(step["fork"], "a", step["peer"])
        elif "clone" in step:
            self.copy(step["clone"], step["from"], self.replicas[step["from"]].peer)
        elif "merge" in step:
            into, source = step["merge"]["into"], step["merge"]["from"]
            self.now[into] = step["now"]
            self.replicas[into].receive(self.replicas[source].replica.ops())
        else:
            self.op(step.get("on", "a"), step)


def scenarios(vectors_dir: Path) -> list[dict[str, Any]]:
    doc = json.loads((vectors_dir / "lazily/collections/seqcrdt_convergence.json").read_text())
    assert doc["model"] == "SeqCrdt"
    found: list[dict[str, Any]] = doc["scenarios"]
    return found


SCENARIOS = scenarios(Path(__file__).resolve().parents[1] / "vectors")


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s["id"] for s in SCENARIOS])
def test_lazily_seqcrdt_scenarios(scenario: dict[str, Any]) -> None:
    run = Replay()
    if "seed" in scenario:
        seed = scenario["seed"]
        run.make("a", seed["peer"])
        for insert in seed["inserts"]:
            run.op("a", {"op": "insert_back", **insert})
    else:
        run.make("a", scenario["replica"]["peer"])
    for step in scenario["steps"]:
        run.step(step)
    expect = scenario["expect"]
    subjects: list[str] = []
    for a, b in expect.get("orders_equal", []):
        assert run.order(a) == run.order(b)
        subjects += [a, b]
    for name, want in expect.get("order_on", {}).items():
        assert run.order(name) == want
        subjects.append(name)
    for name, want in expect.get("get_on", {}).items():
        values = dict(zip(run.order(name), run.replicas[name].list_values("seq"), strict=True))
        assert {k: values[k] for k in want} == want
        subjects.append(name)
    for name, unwanted in expect.get("not_contains_on", {}).items():
        assert not set(unwanted) & set(run.order(name))
    subjects = subjects or ["a"]
    if "order" in expect:
        assert run.order("a") == expect["order"]
    if "get" in expect:
        values = dict(zip(run.order("a"), run.replicas["a"].list_values("seq"), strict=True))
        assert {k: values[k] for k in expect["get"]} == expect["get"]
    for name in subjects:
        if "len" in expect:
            assert len(run.order(name)) == expect["len"]
        for element in expect.get("contains_all", []):
            assert element in run.order(name)


# --- positions and ids --------------------------------------------------------------------

digits = st.lists(st.integers(0, BASE - 1), min_size=1, max_size=6).map(
    lambda d: (*d[:-1], d[-1] or 1)
)


@settings(deadline=None)
@given(digits, digits, st.integers(1, 2**53 - 1))
def test_a_placed_position_falls_strictly_between_its_neighbours(
    a: tuple[int, ...], b: tuple[int, ...], peer: int
) -> None:
    if a == b:
        return
    lo, hi = min(a, b), max(a, b)
    for low, high in ((lo, hi), (None, lo), (hi, None), (None, None)):
        made = place(low, high, peer)
        assert low is None or low < made
        assert high is None or made < high
        assert made[-1] > 0


def test_appending_and_prepending_keep_positions_short() -> None:
    back: tuple[int, ...] | None = None
    front: tuple[int, ...] | None = None
    for _ in range(10_000):
        back = between(back, None)
        front = between(None, front)
    assert back is not None
    assert front is not None
    assert len(back) == len(front) == 1


def test_a_gap_too_deep_for_a_position_is_refused_naming_it() -> None:
    lo = (1,) * (MAX_DIGITS - 1)
    hi = (*lo[:-1], 2)
    with pytest.raises(LimitExceeded) as err:
        place(lo, hi, 7)
    assert err.value.path == "position"


def test_ids_carry_their_minting_peer_in_canonical_form() -> None:
    assert mint_id(WireStamp(1700, 3, 42)) == "42.1700.3"
    assert id_peer("42.1700.3") == 42
    for bad in ("42.1700", "042.1.0", "42.01.0", "0.1.0", "a.1.0", "42.1.0.0", "", "9" * 17):
        assert id_peer(bad) is None


def longest_run(seq: list[int]) -> int:
    """The longest increasing run's length, the slow way."""
    best = [1] * len(seq)
    for i in range(len(seq)):
        for j in range(i):
            if seq[j] < seq[i]:
                best[i] = max(best[i], best[j] + 1)
    return max(best, default=0)


@settings(deadline=None)
@given(
    st.lists(st.integers(0, 30), unique=True, max_size=20),
    st.randoms(use_true_random=False),
    st.lists(st.integers(0, 30), max_size=5),
    st.sets(st.integers(0, 30)),
)
def test_diff_finds_fewest_moves_and_every_insert_delete_and_set(
    ids: list[int], rnd: Any, extra: list[int], edited: set[int]
) -> None:
    old = [(str(i), i) for i in ids]
    kept = [i for i in ids if i % 3]  # some deleted
    rnd.shuffle(kept)
    new_ids = kept + [100 + x for x in dict.fromkeys(extra)]
    new = [(str(i), i + 1000 if i in edited else i) for i in new_ids]
    change = diff(old, new)
    old_index = {e: i for i, (e, _) in enumerate(old)}
    common = [e for e, _ in new if e in old_index]
    assert len(change.moved) == len(common) - longest_run([old_index[e] for e in common])
    assert sorted(i for i, _ in change.inserted) == [
        i for i, (e, _) in enumerate(new) if e not in old_index
    ]
    assert sorted(v for _, v in change.deleted) == sorted(i for i in ids if not i % 3)
    assert sorted(i for i, _ in change.set) == [
        i for i, (e, v) in enumerate(new) if e in old_index and old[old_index[e]][1] != v
    ]
    stayed = [
        e
        for e in common
        if (old_index[e], new.index((e, dict(new)[e]))) not in {(a, b) for a, b, _ in change.moved}
    ]
    assert [old_index[e] for e in stayed] == sorted(old_index[e] for e in stayed)


def test_diff_reports_a_move_as_a_move() -> None:
    old = [("a", 1), ("b", 2), ("c", 3), ("d", 4)]
    change = diff(old, [("b", 2), ("c", 3), ("d", 4), ("a", 1)])
    assert change.moved == ((0, 3, 1),)
    assert (change.inserted, change.deleted, change.set) == ((), (), ())
    change = diff(old, [("a", 1), ("x", 9), ("c", 30), ("d", 4)])
    assert change.inserted == ((1, 9),)
    assert change.deleted == ((1, 2),)
    assert change.set == ((2, 30),)
    assert change.moved == ()


# --- what a server lets a writer send -----------------------------------------------------


def entry(key: str, state: object, peer: int = 7) -> CrdtOp:
    body = state if isinstance(state, bytes) else _JSON.encode(state)
    assert isinstance(body, bytes)
    return CrdtOp(node_of(key.split("/")[0]), WireStamp(5, 0, peer), body, key=key)


def refused(op: CrdtOp, writer: int = 7, held: CrdtOp | None = None) -> OctosyncError:
    with pytest.raises(OctosyncError) as err:
        check_op(op, writer, held, "ops[0]")
    return err.value


def test_only_the_minting_peer_creates_an_element() -> None:
    check_op(entry("todo/lp/7.5.0", [9, 0, 15]), 7, None, "ops[0]")
    check_op(entry("todo/lv/7.5.0", "milk"), 7, None, "ops[0]")
    check_op(entry("todo/ld/7.5.0", True), 7, None, "ops[0]")
    err = refused(entry("todo/lp/8.5.0", [9, 0, 15]))
    assert isinstance(err, Forbidden)
    assert (err.path, "peer 8" in str(err)) == ("ops[0].key", True)
    assert isinstance(refused(entry("todo/lv/8.5.0", "forged")), Forbidden)
    assert isinstance(refused(entry("todo/ld/8.5.0", True)), Forbidden)
    # once peer 8's element exists, any writer moves, sets or removes it, even an entry of
    # it nobody wrote yet (a removal's, say)
    held = {
        "todo/lp/8.5.0": entry("todo/lp/8.5.0", [9, 0, 17], peer=8),
        "todo/lv/8.5.0": entry("todo/lv/8.5.0", "x", peer=8),
    }
    for key, state in (("todo/lp/8.5.0", [3, 0, 15]), ("todo/lv/8.5.0", "y")):
        check_op(entry(key, state), 7, held[key], "ops[0]", held.get)
    check_op(entry("todo/ld/8.5.0", True), 7, None, "ops[0]", held.get)
    only_value = {"todo/lv/8.5.0": held["todo/lv/8.5.0"]}.get
    check_op(entry("todo/ld/8.5.0", True), 7, None, "ops[0]", only_value)
    nothing: dict[str, CrdtOp] = {}
    with pytest.raises(Forbidden):
        check_op(entry("todo/ld/8.5.0", True), 7, None, "ops[0]", nothing.get)


@pytest.mark.parametrize(
    ("key", "state", "path"),
    [
        ("todo/lp/8.5", [1], "ops[0].key"),
        ("todo/lp/07.5.0", [1], "ops[0].key"),
        ("todo/lp/7.5.0/x", [1], "ops[0].key"),
        ("todo/lp/7.5.0", [], "ops[0].state"),
        ("todo/lp/7.5.0", [1, 0], "ops[0].state"),
        ("todo/lp/7.5.0", [2**32], "ops[0].state"),
        ("todo/lp/7.5.0", [-1, 1], "ops[0].state"),
        ("todo/lp/7.5.0", [1.5], "ops[0].state"),
        ("todo/lp/7.5.0", [1] * (MAX_DIGITS + 1), "ops[0].state"),
        ("todo/lp/7.5.0", "a0", "ops[0].state"),
        ("todo/lv/7.5.0", b"\xff{", "ops[0].state"),
        ("todo/ld/7.5.0", False, "ops[0].state"),
        ("todo/ld/7.5.0", [], "ops[0].state"),
    ],
)
def test_a_malformed_list_entry_is_refused_naming_the_field(
    key: str, state: object, path: str
) -> None:
    err = refused(entry(key, state))
    assert isinstance(err, CrdtValueError)
    assert err.path == path


def test_every_op_a_replica_writes_passes_the_servers_checks() -> None:
    state = SharedState(7, iter(range(1, 100)).__next__)
    ops = [*state.list_insert("l", 0, "a"), *state.list_insert("l", 1, "b")]
    ops += [*state.list_move("l", 0, 1), *state.list_set("l", 0, "B"), *state.list_delete("l", 1)]
    held: dict[str | None, CrdtOp] = {}
    for op in ops:
        check_op(op, 7, held.get(op.key), "ops[0]")
        held[op.key] = op
    assert state.list_values("l") == ("B",)
    # one op per stamp: a lazily plane replica keeps one op per (node, stamp)
    assert len({op.stamp for op in ops}) == len(ops)


def test_index_errors_name_the_argument() -> None:
    state = SharedState(7, lambda: 1)
    with pytest.raises(CrdtValueError) as err:
        state.list_insert("l", 1, "x")
    assert err.value.path == "index"
    state.list_insert("l", 0, "x")
    with pytest.raises(CrdtValueError) as err:
        state.list_move("l", 0, 1)
    assert err.value.path == "to"
    with pytest.raises(CrdtValueError):
        state.list_set("l", -1, "x")


# --- replicas editing at once -------------------------------------------------------------


def from_scratch(ops: tuple[CrdtOp, ...]) -> list[str]:
    """The order straight from the winning entries: live elements by (position, peer, id)."""
    regs: dict[str, dict[str, CrdtOp]] = {}
    for op in ops:
        _, tag, element = (op.key or "").split("/")
        regs.setdefault(element, {})[tag] = op
    live = [
        (json.loads(r["lp"].state), r["lp"].stamp.peer, e)  # type: ignore[arg-type]
        for e, r in regs.items()
        if "lp" in r and "lv" in r and "ld" not in r
    ]
    return [e for _, _, e in sorted(live)]


def replay_change(old: list[Any], change: ListChange) -> list[Any]:
    """``old`` with ``change`` applied as a reader applies it: deletions and moves' sources
    out (old indexes), inserts and moves' targets in (new indexes, lowest first), then sets."""
    gone = {i for i, _ in change.deleted} | {a for a, _, _ in change.moved}
    out = [v for i, v in enumerate(old) if i not in gone]
    for i, v in sorted([*change.inserted, *((b, v) for _, b, v in change.moved)]):
        out.insert(i, v)
    for i, v in change.set:
        out[i] = v
    return out


class Lists(RuleBasedStateMachine):
    """Three replicas edit one list. Ops travel through per-replica inboxes that the machine
    delivers in any order, duplicates, or drops (a dropped op stays in its writer's outbox and
    is sent again later, as a client resends its pending edits). After every replica has
    received every op, all hold one order; no element ever appears twice; an element that two
    replicas inserted into one gap at once is kept by both."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = 0
        self.docs = [Replicated(Context(), SharedState(peer, self._tick)) for peer in (3, 1, 2)]
        self.sent: list[list[CrdtOp]] = [[] for _ in self.docs]  # every op each replica wrote
        self.server = PlaneReplica()
        self.inbox: list[list[CrdtOp]] = [[] for _ in self.docs]
        self.inserted: set[str] = set()
        self.edits = [0 for _ in self.docs]
        self.mirrors: list[list[Any]] = [[] for _ in self.docs]
        for i, doc in enumerate(self.docs):
            doc.list("l").on_edit(lambda change, i=i: self._count(i, change))
        self.seen: list[tuple[Any, ...]] = [() for _ in self.docs]
        for i, doc in enumerate(self.docs):  # an effect tracking the list re-runs on each change
            doc.list("l").on_change(lambda values, i=i: self._saw(i, values))

    def _saw(self, i: int, values: tuple[Any, ...]) -> None:
        self.seen[i] = values

    @invariant()
    def a_tracked_read_sees_every_change(self) -> None:
        for doc, seen in zip(self.docs, self.seen, strict=True):
            assert seen == doc.list("l").value

    def _count(self, i: int, change: ListChange) -> None:
        self.edits[i] += 1
        self.mirrors[i] = replay_change(self.mirrors[i], change)

    @invariant()
    def change_events_replay_to_the_list(self) -> None:
        for doc, mirror in zip(self.docs, self.mirrors, strict=True):
            assert mirror == list(doc.list("l"))

    def _tick(self) -> int:
        self.clock += 1
        return self.clock // 3  # equal wall times are common: the logical counter and peer decide

    def _wrote(self, i: int) -> None:
        ops = self.docs[i].take_outgoing()
        for op in ops:  # the server's write check, against everything sent before
            node = op.slot_id
            check_op(
                op,
                self.docs[i].state.peer,
                self.server.get(node, op.key),
                "ops[0]",
                lambda key, node=node: self.server.get(node, key),
            )
            self.server.apply(op)
        self.sent[i] += ops
        for j in range(len(self.docs)):
            if j != i:
                self.inbox[j] += ops
        for op in ops:
            if op.key and "/lv/" in op.key:
                self.inserted.add(op.key.split("/")[2])

    @rule(i=st.integers(0, 2), at=st.integers(0, 10), value=st.integers(0, 9))
    def insert(self, i: int, at: int, value: int) -> None:
        lst = self.docs[i].list("l")
        lst.insert(min(at, len(lst)), value)
        self._wrote(i)

    @rule(i=st.integers(0, 2), a=st.integers(0, 10), b=st.integers(0, 10))
    def move(self, i: int, a: int, b: int) -> None:
        lst = self.docs[i].list("l")
        if len(lst):
            lst.move(a % len(lst), b % len(lst))
            self._wrote(i)

    @rule(i=st.integers(0, 2), a=st.integers(0, 10))
    def delete(self, i: int, a: int) -> None:
        lst = self.docs[i].list("l")
        if len(lst):
            lst.delete(a % len(lst))
            self._wrote(i)

    @rule(i=st.integers(0, 2), a=st.integers(0, 10), value=st.integers(10, 19))
    def set(self, i: int, a: int, value: int) -> None:
        lst = self.docs[i].list("l")
        if len(lst):
            lst.set(a % len(lst), value)
            self._wrote(i)

    @rule(i=st.integers(0, 2), picks=st.lists(st.integers(0, 200), max_size=8), keep=st.booleans())
    def deliver_some(self, i: int, picks: list[int], keep: bool) -> None:
        """Deliver some of replica ``i``'s inbox in any order; ``keep``: duplicate them (they
        stay for later), else they are gone (dropped, if never delivered before: the resend
        rule brings them back)."""
        box = self.inbox[i]
        if not box:
            return
        chosen = [box[p % len(box)] for p in picks]
        self.docs[i].merge(chosen)
        if not keep:
            self.inbox[i] = [op for op in box if op not in chosen]

    @rule(i=st.integers(0, 2), drop=st.integers(0, 200))
    def drop(self, i: int, drop: int) -> None:
        if self.inbox[i]:
            del self.inbox[i][drop % len(self.inbox[i])]

    @precondition(lambda self: any(self.sent))
    @rule()
    def settle(self) -> None:
        """Everyone resends everything (a reconnect): all converge."""
        for i, doc in enumerate(self.docs):
            for j, ops in enumerate(self.sent):
                if i != j:
                    doc.merge(reversed(ops))
            self.inbox[i] = []
        orders = [[e.id for e in d.state.list_elements("l")] for d in self.docs]
        values = [d.list("l").value for d in self.docs]
        assert orders[0] == orders[1] == orders[2]
        assert values[0] == values[1] == values[2]
        removed = {
            op.key.split("/")[2] for ops in self.sent for op in ops if op.key and "/ld/" in op.key
        }
        # nothing lost: every insert not removed is there (both of two concurrent ones kept)
        assert self.inserted - removed <= set(orders[0])

    @invariant()
    def nothing_is_ever_twice(self) -> None:
        for doc in self.docs:
            ids = [e.id for e in doc.state.list_elements("l")]
            assert len(ids) == len(set(ids))
            assert doc.list("l").value == tuple(e.value for e in doc.state.list_elements("l"))
            assert ids == from_scratch(doc.state.replica.ops())


Lists.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
test_replicas_editing_one_list_converge = Lists.TestCase


def test_concurrent_inserts_into_one_gap_both_stay_and_order_alike() -> None:
    a = Replicated(Context(), SharedState(1, lambda: 5))
    b = Replicated(Context(), SharedState(2, lambda: 5))
    a.list("l").push("x")
    a.list("l").push("y")
    b.merge(a.take_outgoing())
    a.list("l").insert(1, "from a")
    b.list("l").insert(1, "from b")
    seen: list[dict[str, Any]] = []
    a.list("l").on_edit(lambda change: seen.append(change.as_dict()))
    a.merge(b.take_outgoing())
    b.merge(a.take_outgoing())
    assert a.list("l").value == b.list("l").value
    assert set(a.list("l").value[1:3]) == {"from a", "from b"}
    assert (a.list("l")[0], a.list("l")[3]) == ("x", "y")
    assert [len(s["inserted"]) for s in seen] == [1]


def test_concurrent_moves_of_one_element_keep_one_copy_at_the_later_move() -> None:
    walls = iter(range(1, 100))
    clock = walls.__next__
    a = Replicated(Context(), SharedState(1, clock))
    b = Replicated(Context(), SharedState(2, clock))
    for v in "wxyz":
        a.list("l").push(v)
    b.merge(a.take_outgoing())
    a.list("l").move(0, 2)  # w after y
    b.list("l").move(0, 3)  # w last: the later stamp
    moves: list[Any] = []
    a.list("l").on_edit(lambda change: moves.append(change.moved))
    a.merge(b.take_outgoing())
    b.merge(a.take_outgoing())
    assert a.list("l").value == b.list("l").value == ("x", "y", "z", "w")
    assert moves == [((2, 3, "w"),)]


def test_a_removal_stays_removed_whatever_edit_or_move_was_made_at_once() -> None:
    walls = iter(range(1, 100))
    clock = walls.__next__
    a = Replicated(Context(), SharedState(1, clock))
    b = Replicated(Context(), SharedState(2, clock))
    for v in "xyz":
        a.list("l").push(v)
    b.merge(a.take_outgoing())
    a.list("l").delete(0)
    b.list("l").set(0, "X")  # later stamps than the removal: an edit and a move of x
    b.list("l").move(0, 2)
    a.merge(b.take_outgoing())
    b.merge(a.take_outgoing())
    assert a.list("l").value == b.list("l").value == ("y", "z")


def test_a_documents_values_include_its_lists_in_order() -> None:
    """What the pipeline and the inspector show of a document (``document_values``)."""
    from octosync.crdt.shared import document_values

    walls = iter(range(1, 100))
    state = SharedState(7, walls.__next__)
    ops = [*state.list_insert("todo", 0, "b"), *state.list_insert("todo", 0, "a")]
    ops += [*state.list_insert("todo", 2, "c"), *state.list_delete("todo", 1)]
    ops.append(state.add("clicks", 2))
    assert document_values(reversed(ops)) == [("clicks", "pn", 2), ("todo", "list", ["a", "c"])]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 3), max_size=12),
    st.sampled_from(["insert", "delete", "move", "set", "move and set", "set equal"]),
    st.integers(0, 100),
    st.integers(0, 100),
    st.integers(0, 3),
)
def test_one_elements_change_is_reported_as_diff_reports_it(
    values: list[int], kind: str, a: int, b: int, value: int
) -> None:
    """The change worked out from one element's edit alone is the change ``diff`` finds
    between the whole orders (values repeat, so equal neighbours are covered)."""
    before = [(f"e{i}", v) for i, v in enumerate(values)]
    after = list(before)
    if kind == "insert":
        old_at, new_at = None, a % (len(before) + 1)
        after.insert(new_at, ("new", value))
    elif not before:
        return
    elif kind == "delete":
        old_at, new_at = a % len(before), None
        del after[old_at]
    else:
        old_at = a % len(before)
        new_at = old_at if kind.startswith("set") else b % len(before)
        element, old_value = after.pop(old_at)
        if kind == "set equal":
            value = old_value
        after.insert(new_at, (element, old_value if kind == "move" else value))
    moved = after[new_at][1] if new_at is not None else None
    assert one_change(before, old_at, new_at, moved) == diff(before, after)
