"""The hub's graph mirror agrees with the state plane's own Mirror on real Publisher output."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from octosync import Context
from octosync.hub import GraphModel, lazily_frame
from octosync.hub.model import DiffFrame, SnapshotFrame
from octosync.ipc.messages import (
    CellSet,
    Delta,
    EdgeAdd,
    EdgeRemove,
    Invalidate,
    NodeAdd,
    NodeRemove,
    NodeSnapshot,
    Snapshot,
)
from octosync.ipc.mirror import Mirror
from octosync.ipc.permissions import PeerPermissions
from octosync.ipc.publisher import Publisher
from octosync.ipc.state_hash import snapshot_hash

step = st.one_of(
    st.tuples(st.just("set"), st.integers(0, 3), st.integers(-5, 5)),
    st.tuples(st.just("memo"), st.integers(0, 3), st.integers(0, 3)),
    st.tuples(st.just("dispose"), st.integers(0, 10), st.just(0)),
    st.tuples(st.just("batch"), st.integers(0, 3), st.integers(-5, 5)),
)


@settings(max_examples=40)
@given(st.lists(step, max_size=25))
def test_graph_model_tracks_the_publisher_like_the_mirror(
    steps: list[tuple[str, int, int]],
) -> None:
    ctx = Context()
    cells = [ctx.cell(i, type_tag="i64") for i in range(4)]
    memos: list[Any] = []
    pub = Publisher(ctx, PeerPermissions.allow_all())
    model = GraphModel()
    mirror = Mirror()
    first = pub.snapshot()
    model.reset(SnapshotFrame(first.epoch, first))
    mirror.apply(first)
    for kind, a, b in steps:
        if kind == "set":
            cells[a].set(b)
        elif kind == "batch":
            with ctx.batch():
                cells[a].set(b)
                cells[(a + 1) % 4].set(-b)
        elif kind == "memo":
            x, y = cells[a], cells[b]
            memos.append(ctx.memo(lambda x=x, y=y: x.get() + y.get(), type_tag="i64"))
            memos[-1].get()
        elif memos:
            memos.pop(a % len(memos)).dispose()
        for d in pub.drain():
            frame = lazily_frame(d)
            assert isinstance(frame, DiffFrame)
            model.apply(frame)
            mirror.apply(d)
    snap = model.snapshot()
    assert isinstance(snap, Snapshot)
    assert snap.epoch == mirror.last_epoch
    assert sorted(snap.nodes, key=lambda n: n.slot_id) == sorted(
        mirror.nodes, key=lambda n: n.slot_id
    )
    assert set(snap.edges) == set(mirror.edges)
    assert snapshot_hash(snap) == mirror.state_hash()


def test_a_rejected_delta_changes_nothing() -> None:
    from octosync.errors import RemoteProtocolError
    from octosync.ipc.messages import CellSet, NodeRemove

    model = GraphModel()
    ctx = Context()
    ctx.cell(1, type_tag="i64")
    snap = Publisher(ctx, PeerPermissions.allow_all()).snapshot()
    model.reset(SnapshotFrame(snap.epoch, snap))
    before = model.snapshot()
    bad = Delta(snap.epoch, snap.epoch + 1, (NodeRemove(0), CellSet(0, b"x")))
    with pytest.raises(RemoteProtocolError) as err:
        model.apply(DiffFrame(bad.base_epoch, bad.epoch, bad))
    assert err.value.path == "ops[1]"
    assert model.snapshot() == before


small_ids = st.integers(0, 5)
ops = st.one_of(
    st.builds(CellSet, small_ids, st.binary(max_size=2)),
    st.builds(NodeAdd, small_ids, st.just("bytes"), st.binary(max_size=2)),
    st.builds(NodeRemove, small_ids),
    st.builds(EdgeAdd, small_ids, small_ids),
    st.builds(EdgeRemove, small_ids, small_ids),
    st.builds(Invalidate, small_ids),
)


@st.composite
def producer_frames(draw: st.DrawFn) -> list[tuple[str, Any]]:
    """A producer's frames, some of them bad: unknown nodes, duplicate adds, wrong bases."""
    frames: list[tuple[str, Any]] = []
    for _ in range(draw(st.integers(1, 25))):
        if draw(st.integers(0, 9)) == 0:
            ids = draw(st.lists(small_ids, max_size=4))
            frames.append(("snapshot", (draw(st.integers(0, 3)), ids)))
        else:
            frames.append(("delta", (draw(st.integers(-1, 1)), draw(st.lists(ops, max_size=4)))))
    return frames


@settings(max_examples=150)
@given(producer_frames())
def test_the_hub_accepts_exactly_what_a_subscribers_mirror_accepts(
    frames: list[tuple[str, Any]],
) -> None:
    """One rule set: whatever the hub fans out, every mirror applies without a resync, and
    whatever a mirror in step would refuse, the hub refuses (and changes nothing)."""
    from octosync.errors import OctosyncError
    from octosync.hub import Hub, HubConfig, ViewKey
    from octosync.ipc.mirror import Applied
    from tests.hub.helpers import decode, json_encoder

    hub = Hub(HubConfig(), clock=lambda: 0.0, encoders={"json": json_encoder})
    hub.connect(1, ViewKey("lazily", "json"))
    hub.connect(2, ViewKey("lazily", "json"))
    hub.subscribe(2, "s")
    subscriber = Mirror()
    oracle = Mirror()  # the frames the hub accepted, applied in order
    for kind, spec in frames:
        last = oracle.last_epoch if oracle.last_epoch is not None else 0
        msg: Snapshot | Delta
        if kind == "snapshot":
            epoch, ids = spec
            nodes = tuple(NodeSnapshot(i, "bytes", "resolved", b"") for i in sorted(set(ids)))
            msg = Snapshot(epoch=epoch, nodes=nodes)
        else:
            skew, delta_ops = spec
            base = max(0, last + skew)
            msg = Delta(base, base + 1, tuple(delta_ops))
        probe = Mirror()
        if oracle.last_epoch is not None:
            probe.apply(oracle.snapshot())
        mirror_accepts = isinstance(probe.apply(msg), Applied) and (
            isinstance(msg, Snapshot) or oracle.last_epoch is not None
        )
        try:
            hub.publish(1, "s", lazily_frame(msg))
            hub_accepts = True
        except OctosyncError:
            hub_accepts = False
        assert hub_accepts == mirror_accepts, (kind, msg)
        if hub_accepts:
            oracle.apply(msg)
        for raw in hub.take(2):
            assert isinstance(subscriber.apply(decode(raw)), Applied)
    if oracle.last_epoch is not None:
        assert subscriber.snapshot().nodes == oracle.snapshot().nodes
        assert subscriber.edges == oracle.edges
