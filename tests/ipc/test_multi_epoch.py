"""Multi-epoch-span deltas (lazily-spec § Multi-epoch-span delta): one delta from ``base`` to
``base + k`` applies like the k unit deltas carrying the same ops in order, in the Mirror, in
the hub's GraphModel and through every wire dialect; the gap rule applies to ``base_epoch``."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.errors import EpochGap
from octosync.hub.model import DiffFrame, GraphModel, SnapshotFrame
from octosync.ipc.messages import CellSet, Delta, NodeAdd, NodeRemove, NodeSnapshot, Snapshot
from octosync.ipc.mirror import Applied, Mirror, ResyncRequest
from octosync.wire import DIALECTS

BASE = Snapshot(
    40, tuple(NodeSnapshot(i, "bytes", "resolved", bytes([i])) for i in range(1, 4)), roots=(1,)
)

# One unit delta's ops: values written to existing nodes, nodes added (ids 10..12) and removed.
op = st.one_of(
    st.builds(CellSet, st.integers(1, 3), st.binary(max_size=3)),
    st.builds(NodeAdd, st.integers(10, 12), st.just("bytes"), st.binary(max_size=3)),
    st.builds(NodeRemove, st.integers(10, 12)),
)
units_ops = st.lists(st.lists(op, min_size=1, max_size=3), min_size=2, max_size=5)


def unit_chain(ops: list[list[object]]) -> list[Delta]:
    return [Delta(BASE.epoch + i, BASE.epoch + i + 1, tuple(o)) for i, o in enumerate(ops)]  # type: ignore[arg-type]


def fuse(units: list[Delta]) -> Delta:
    return Delta(units[0].base_epoch, units[-1].epoch, tuple(o for u in units for o in u.ops))


@given(units_ops)
def test_mirror_applies_a_span_like_the_fold_of_its_units(ops: list[list[object]]) -> None:
    units = unit_chain(ops)
    folded, batch = Mirror(), Mirror()
    folded.apply(BASE)
    batch.apply(BASE)
    results = [folded.apply(u) for u in units]
    result = batch.apply(fuse(units))
    if all(isinstance(r, Applied) for r in results):
        assert result == Applied(units[-1].epoch)
        assert batch.snapshot() == folded.snapshot()
    else:
        # A unit that breaks the graph breaks the batch too, and the batch changes nothing.
        assert isinstance(result, ResyncRequest)
        assert batch.last_epoch == BASE.epoch
        fresh = Mirror()
        fresh.apply(BASE)
        assert batch.nodes == fresh.nodes


@given(units_ops)
def test_graph_model_applies_a_span_like_the_mirror(ops: list[list[object]]) -> None:
    span = fuse(unit_chain(ops))
    mirror, model = Mirror(), GraphModel()
    mirror.apply(BASE)
    model.reset(SnapshotFrame(BASE.epoch, BASE))
    if isinstance(mirror.apply(span), Applied):
        model.apply(DiffFrame(span.base_epoch, span.epoch, span))
        assert model.epoch == span.epoch
        assert model.snapshot() == mirror.snapshot()


@given(st.integers(0, 100), st.integers(1, 5), st.integers(0, 100))
def test_the_gap_rule_is_on_base_epoch_at_any_span(base: int, span: int, last: int) -> None:
    delta = Delta(base, base + span, ())
    mirror, model = Mirror(), GraphModel()
    mirror.apply(Snapshot(last))
    model.reset(SnapshotFrame(last, Snapshot(last)))
    result = mirror.apply(delta)
    if last == base:
        assert result == Applied(base + span)
        model.apply(DiffFrame(base, base + span, delta))
        assert model.epoch == base + span
    elif base + span <= last:
        assert result.reason == "already_applied"  # type: ignore[union-attr]
    else:
        assert result == ResyncRequest(last_epoch=last, reason="EpochGap")
        with pytest.raises(EpochGap):
            model.apply(DiffFrame(base, base + span, delta))
        assert model.epoch == last


@pytest.mark.parametrize("name", sorted(DIALECTS))
@given(units_ops)
def test_every_dialect_carries_a_span(name: str, ops: list[list[object]]) -> None:
    codec = DIALECTS[name]
    span = fuse(unit_chain(ops))
    back = codec.decode(codec.encode(span))
    assert isinstance(back, Delta)
    assert (back.base_epoch, back.epoch, back.span) == (span.base_epoch, span.epoch, span.span)
    assert back == span
