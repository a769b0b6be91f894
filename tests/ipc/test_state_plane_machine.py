"""The state plane end to end, as a history: graph -> publishers -> unreliable wire -> mirrors.

Random graphs of cells, memos and signals (some reading their inputs conditionally, so edges
move); random batched writes, disposals and reads; every message goes through the seed JSON
codec and then through a channel that may drop, duplicate or reorder it. Three peers with
different views: everything in mirror-lazy mode, a restricted view in value mode (the sender
resolves what that peer reads), both with state hashes, and a restricted mirror-lazy view.
Some computations fail for some inputs, so errors travel too.
After every step: the seed's four invariants hold in every delta produced, and a mirror that
has caught up equals the producer's view for its peer; a gap is recovered through resync.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from octosync import Context
from octosync.errors import ComputeError, Desync
from octosync.graph import Node
from octosync.ipc.messages import (
    CellSet,
    Delta,
    EdgeAdd,
    EdgeRemove,
    Invalidate,
    NodeAdd,
    NodeRemove,
    ResyncRequest,
    SlotValue,
    Snapshot,
)
from octosync.ipc.mirror import Mirror
from octosync.ipc.permissions import PeerPermissions
from octosync.ipc.publisher import Publisher
from octosync.wire import json as wire

MAX_NODES = 12
values = st.integers(-3, 3)


class Peer:
    """One peer: its publisher, what is in flight to it, its mirror, and a shadow of its view.

    The shadow is rebuilt from the producer's stream alone (not from the mirror), so the
    invariant checks do not depend on the code under test receiving anything.
    """

    def __init__(self, name: str, pub: Publisher) -> None:
        self.name = name
        self.pub = pub
        self.mirror = Mirror()
        self.wire: list[bytes] = []
        self.wants_snapshot = True  # a new peer starts by asking for one
        snap = pub.snapshot()
        self.shadow: dict[int, tuple[str, bytes | None]] = {
            n.slot_id: (n.state, n.payload)
            for n in snap.nodes  # type: ignore[misc]
        }


class StatePlane(RuleBasedStateMachine):
    @initialize(
        readable=st.sets(st.integers(0, MAX_NODES + 4), max_size=MAX_NODES),
        readable_lazy=st.sets(st.integers(0, MAX_NODES + 4), max_size=MAX_NODES),
        cells=st.lists(values, min_size=2, max_size=4),
        data=st.data(),
    )
    def start(
        self, readable: set[int], readable_lazy: set[int], cells: list[int], data: st.DataObject
    ) -> None:
        self.ctx = Context()
        self.refs: dict[Node, set[Node]] = {}
        self.tainted: set[Node] = set()
        """fragile nodes and nodes that read them: the only ones that may fail to compute"""
        """node -> the nodes whose functions may read it"""
        self.peers = [
            Peer(
                "all",
                Publisher(self.ctx, PeerPermissions.allow_all(), mode="lazy", hash_state=True),
            ),
            Peer("some", Publisher(self.ctx, PeerPermissions(read=readable), hash_state=True)),
            Peer(
                "few",
                Publisher(self.ctx, PeerPermissions(read=readable_lazy), mode="lazy"),
            ),
        ]
        for value in cells:
            self.add_cell(value)
        for _ in range(data.draw(st.integers(2, 5))):
            self.add_derived(
                data,
                data.draw(st.booleans()),
                data.draw(st.booleans()),
                data.draw(st.integers(2, 5)),
                data.draw(st.booleans()),
            )
        for memo in self.live(("memo",)):
            self._read(memo)
        self._pump()

    # --- helpers -----------------------------------------------------------------------------

    def live(self, kinds: tuple[str, ...] = ("cell", "memo", "signal")) -> list[Node]:
        return [n for n in self.ctx.nodes() if n.kind in kinds]

    def _pump(self) -> None:
        """Move every publisher's new deltas onto its wire, checking the invariants first."""
        for peer in self.peers:
            for delta in peer.pub.drain():
                self._check_delta(peer, delta)
                peer.wire.append(wire.encode(delta))

    def _check_delta(self, peer: Peer, delta: Delta) -> None:
        assert delta.ops, "a delta is sent only when something visible changed"
        shadow = peer.shadow
        reached: list[int] = []
        for op in delta.ops:
            if isinstance(op, CellSet):
                state, payload = shadow[op.slot_id]
                # equality guard: a cell_set always carries a new value
                assert (state, payload) != ("resolved", op.payload), (peer.name, op)
                assert self.ctx.node(op.slot_id).kind == "cell"
                shadow[op.slot_id] = ("resolved", op.payload)
                reached.append(op.slot_id)
            elif isinstance(op, SlotValue):
                # memo equality suppression: a slot_value is never a repeat of what the peer holds
                assert shadow[op.slot_id] != ("resolved", op.payload), (peer.name, op)
                shadow[op.slot_id] = ("resolved", op.payload)
                reached.append(op.slot_id)
            elif isinstance(op, Invalidate):
                # eager signals are concrete: a bare invalidate only for a lazy peer's memo, or
                # for a node whose compute failed (it has no value to send)
                node = self.ctx.node(op.slot_id)
                if peer.pub.mode == "value" or node.kind == "signal":
                    assert node in self.tainted, (peer.name, op)
                    assert not node.resolved, (peer.name, op)
                assert shadow[op.slot_id][0] == "resolved"
                shadow[op.slot_id] = ("dirty", None)
                reached.append(op.slot_id)
            elif isinstance(op, NodeAdd):
                assert op.slot_id not in shadow
                shadow[op.slot_id] = (op.effective_state, op.payload)  # type: ignore[assignment]
            elif isinstance(op, NodeRemove):
                del shadow[op.slot_id]
            else:
                assert isinstance(op, EdgeAdd | EdgeRemove)
                assert op.dependent in shadow or isinstance(op, EdgeRemove)
        # coalesced frontier: each node reached at most once per delta
        assert len(reached) == len(set(reached)), (peer.name, delta)

    def _expected(self, peer: Peer) -> tuple[dict[int, Any], set[tuple[int, int]]]:
        """The producer's view for this peer, read from the graph through its public API."""
        can_read = peer.pub.permissions.can_read
        vals: dict[int, Any] = {}
        edges: set[tuple[int, int]] = set()
        for node in self.live():
            if not can_read(node.id):
                continue
            if node.resolved:
                vals[node.id] = node.get()  # type: ignore[attr-defined]
            edges.update((node.id, d.id) for d in node.dependencies if can_read(d.id))
        return vals, edges

    def _read(self, node: Node) -> None:
        """Read a memo; only a tainted one may fail, and then with its own ValueError."""
        if node not in self.tainted:
            node.get()  # type: ignore[attr-defined]
            return
        with contextlib.suppress(ComputeError):
            node.get()  # type: ignore[attr-defined]

    def _deliver(self, peer: Peer, index: int, keep: bool = False) -> None:
        data = peer.wire[index] if keep else peer.wire.pop(index)
        result = peer.mirror.apply(wire.decode(data))
        if isinstance(result, ResyncRequest):
            peer.wants_snapshot = True
        assert not isinstance(peer.mirror.last_error, Desync), peer.mirror.last_error

    # --- graph rules -------------------------------------------------------------------------

    @precondition(lambda self: len(self.live()) < MAX_NODES)
    @rule(value=values)
    def add_cell(self, value: int) -> None:
        node = self.ctx.cell(value, type_tag="i64")
        self.refs[node] = set()
        self._pump()

    @precondition(lambda self: self.live() and len(self.live()) < MAX_NODES)
    @rule(
        data=st.data(),
        eager=st.booleans(),
        conditional=st.booleans(),
        modulus=st.integers(2, 5),
        fragile=st.sampled_from([False, False, False, True]),
    )
    def add_derived(
        self, data: st.DataObject, eager: bool, conditional: bool, modulus: int, fragile: bool
    ) -> None:
        """A derived node; a fragile one raises whenever its result would be 0."""
        pool = self.live()
        sources = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3))
        fn: Callable[[], int]
        if conditional and len(sources) == 3:
            test, yes, no = sources

            def compute() -> int:
                return (yes if test.get() > 0 else no).get() % modulus  # type: ignore[attr-defined, no-any-return]
        else:

            def compute() -> int:
                return sum(s.get() for s in sources) % modulus  # type: ignore[attr-defined, no-any-return]

        def fn() -> int:
            result = compute()
            if fragile and result == 0:
                raise ValueError("zero")
            return result

        make = self.ctx.signal if eager else self.ctx.memo
        node = make(fn, type_tag="i64")
        self.refs[node] = set()
        for source in sources:
            self.refs[source].add(node)
        if fragile or any(s in self.tainted for s in sources):
            self.tainted.add(node)
        self._pump()

    @precondition(lambda self: self.live(("cell",)))
    @rule(data=st.data())
    def write_batch(self, data: st.DataObject) -> None:
        cells = self.live(("cell",))
        writes = data.draw(
            st.lists(st.tuples(st.sampled_from(cells), values), min_size=1, max_size=6)
        )
        with self.ctx.batch():
            for cell, value in writes:
                cell.set(value)  # type: ignore[attr-defined]
        self._pump()

    @precondition(lambda self: self.live(("memo",)))
    @rule(data=st.data())
    def read_memo(self, data: st.DataObject) -> None:
        memo = data.draw(st.sampled_from(self.live(("memo",))))
        self._read(memo)
        self._pump()

    @precondition(lambda self: any(not self.refs[n] for n in self.live()))
    @rule(data=st.data())
    def dispose(self, data: st.DataObject) -> None:
        """Dispose a node that no live node's function can read (so nothing fails)."""
        node = data.draw(st.sampled_from([n for n in self.live() if not self.refs[n]]))
        node.dispose()
        del self.refs[node]
        self.tainted.discard(node)
        for readers in self.refs.values():
            readers.discard(node)
        self._pump()

    # --- delivery rules ----------------------------------------------------------------------

    @rule(data=st.data(), peer=st.integers(0, 2))
    def deliver(self, data: st.DataObject, peer: int) -> None:
        """Deliver the oldest message, or a later one (reorder)."""
        p = self.peers[peer]
        if p.wire:
            index = data.draw(st.sampled_from([0, 0, 0, len(p.wire) - 1]))
            self._deliver(p, index)

    @rule(peer=st.integers(0, 2))
    def drop(self, peer: int) -> None:
        p = self.peers[peer]
        if p.wire:
            p.wire.pop(0)

    @rule(peer=st.integers(0, 2))
    def duplicate(self, peer: int) -> None:
        p = self.peers[peer]
        if p.wire:
            self._deliver(p, 0, keep=True)

    @rule(peer=st.integers(0, 2))
    def answer_resync(self, peer: int) -> None:
        p = self.peers[peer]
        if p.wants_snapshot:
            p.wants_snapshot = False
            snap = p.pub.snapshot()
            self._pump()  # resolving for the snapshot may have been a flush of its own
            p.wire.append(wire.encode(snap))

    @rule()
    def settle(self) -> None:
        """Reliable delivery from here: every mirror must converge, through resync if needed."""
        for peer in self.peers:
            for _ in range(4):
                while peer.wire:
                    self._deliver(peer, 0)
                if peer.mirror.in_sync and peer.mirror.last_epoch == peer.pub.epoch:
                    break
                peer.wants_snapshot = False
                peer.wire.append(wire.encode(peer.pub.snapshot()))
                self._pump()
            assert peer.mirror.in_sync, peer.name
            assert peer.mirror.last_epoch == peer.pub.epoch, peer.name
        self.in_sync_views_match()

    # --- invariants --------------------------------------------------------------------------

    @invariant()
    def in_sync_views_match(self) -> None:
        for peer in self.peers:
            mirror = peer.mirror
            if not (mirror.in_sync and mirror.last_epoch == peer.pub.epoch):
                continue
            vals, edges = self._expected(peer)
            assert mirror.values() == vals, peer.name
            assert {(e.dependent, e.dependency) for e in mirror.edges} == edges, peer.name
            assert {n.slot_id: n.payload for n in mirror.nodes} == {
                k: v[1] for k, v in peer.shadow.items()
            }
            if peer.pub.mode == "value":  # the sender resolved all it could
                assert all(
                    n.state == "resolved" or self.ctx.node(n.slot_id) in self.tainted
                    for n in mirror.nodes
                ), peer.name

    @invariant()
    def epochs_are_context_wide_for_full_views(self) -> None:
        assert self.peers[0].pub.epoch == self.ctx.epoch
        assert self.peers[1].pub.epoch <= self.ctx.epoch
        assert self.peers[2].pub.epoch <= self.ctx.epoch


StatePlane.TestCase.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
TestStatePlane = StatePlane.TestCase


def test_snapshot_after_gap_resumes_the_chain() -> None:
    ctx = Context()
    a = ctx.cell(0, type_tag="i64")
    pub = Publisher(ctx, PeerPermissions.allow_all())
    mirror = Mirror()
    mirror.apply(pub.snapshot())
    a.set(1)
    a.set(2)
    first, second = pub.drain()
    assert isinstance(mirror.apply(second), ResyncRequest)  # the first was lost
    snap = pub.snapshot()
    assert isinstance(snap, Snapshot)
    mirror.apply(snap)
    a.set(3)
    for delta in [first, second, *pub.drain()]:
        mirror.apply(delta)
    assert mirror.in_sync
    assert mirror.values() == {a.id: 3}
