"""The hub's graph mirror agrees with the state plane's own Mirror on real Publisher output."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from octosync import Context
from octosync.hub import GraphModel, lazily_frame
from octosync.hub.model import DiffFrame, SnapshotFrame
from octosync.ipc.messages import Delta, Snapshot
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
