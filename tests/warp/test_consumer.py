"""The per-WarpId consumer algorithm, against a producer, as a hypothesis state machine."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from octosync.errors import Desync, EpochGap, SnapshotRequired
from octosync.warp import graph as g
from octosync.warp.consumer import Phase, WarpConsumer, WarpProducer
from octosync.wire import wvp


def test_snapshot_then_diffs_verify_every_hash() -> None:
    producer = WarpProducer()
    consumer = WarpConsumer(7)
    assert consumer.phase is Phase.IDLE
    consumer.apply(producer.snapshot())
    consumer.apply(producer.diff([g.add_node(1, b"x"), g.add_node(2)]))
    consumer.apply(producer.diff([g.add_edge(3, 1, 2)]))
    assert consumer.phase is Phase.LIVE
    assert (consumer.epoch, consumer.verified) == (2, 3)
    assert consumer.graph == producer.graph


def test_diff_before_snapshot_and_gap() -> None:
    consumer = WarpConsumer(1)
    with pytest.raises(SnapshotRequired):
        consumer.apply(wvp.WarpDiff(0, 1, []))
    consumer.apply(wvp.WarpSnapshot(4, RenderGraphPlain.EMPTY))
    with pytest.raises(EpochGap):
        consumer.apply(wvp.WarpDiff(5, 6, []))
    assert consumer.phase is Phase.DESYNCED
    assert consumer.apply(wvp.WarpDiff(4, 5, [])) is False  # ignored until a snapshot
    consumer.apply(wvp.WarpSnapshot(9, RenderGraphPlain.EMPTY))
    assert (consumer.phase, consumer.epoch) == (Phase.LIVE, 9)


def test_a_wrong_hash_is_desync_and_keeps_the_last_good_graph() -> None:
    producer = WarpProducer()
    consumer = WarpConsumer(1)
    consumer.apply(producer.snapshot())
    good = producer.diff([g.add_node(1)])
    consumer.apply(good)
    bad = producer.diff([g.add_node(2)])
    lie = wvp.WarpDiff(bad.from_epoch, bad.to_epoch, bad.ops, bytes(32))
    with pytest.raises(Desync) as info:
        consumer.apply(lie)
    assert info.value.path == "state_hash"
    assert consumer.phase is Phase.DESYNCED
    assert (consumer.epoch, list(consumer.graph.nodes)) == (1, [1])


def test_frames_without_hashes_are_applied_unverified() -> None:
    producer = WarpProducer(hashed=False)
    consumer = WarpConsumer(1)
    consumer.apply(producer.snapshot())
    consumer.apply(producer.diff([g.add_node(1)]))
    assert (consumer.epoch, consumer.verified) == (1, 0)


class RenderGraphPlain:
    EMPTY: ClassVar[dict[str, Any]] = {"nodes": [], "edges": []}


class ConsumerMachine(RuleBasedStateMachine):
    """A producer streams to a consumer over a channel that may lose or corrupt a frame.
    The consumer is either live on the producer's exact graph, or desynced until the next
    snapshot; it is never live on a wrong graph."""

    def __init__(self) -> None:
        super().__init__()
        self.producer = WarpProducer()
        self.consumer = WarpConsumer(1)
        self.consumer.apply(self.producer.snapshot())
        self.broken = False

    def _ops(self, data: st.DataObject) -> list[object]:
        nodes = sorted(self.producer.graph.nodes)
        edges = sorted(self.producer.graph.edges)
        choices: list[object] = [
            g.add_node(max(nodes, default=0) + 1, data.draw(st.binary(max_size=4)))
        ]
        if nodes:
            n = data.draw(st.sampled_from(nodes))
            choices += [g.update_node(n, b"u"), g.remove_node(n)]
            m = data.draw(st.sampled_from(nodes))
            choices.append(g.add_edge(max(edges, default=0) + 1, n, m))
        if edges:
            e = data.draw(st.sampled_from(edges))
            choices += [g.update_edge(e, b"v"), g.remove_edge(e)]
        return [data.draw(st.sampled_from(choices))]

    @rule(data=st.data())
    def deliver_diff(self, data: st.DataObject) -> None:
        frame = self.producer.diff(self._ops(data))
        if self.broken:
            self._after_a_loss(frame)
        else:
            assert self.consumer.apply(frame) is True

    @rule(data=st.data())
    def lose_a_diff(self, data: st.DataObject) -> None:
        self.producer.diff(self._ops(data))
        self.broken = True

    @rule(data=st.data())
    def corrupt_a_diff(self, data: st.DataObject) -> None:
        frame = self.producer.diff(self._ops(data))
        lie = wvp.WarpDiff(frame.from_epoch, frame.to_epoch, frame.ops, b"\x00" * 32)
        if self.broken:
            self._after_a_loss(lie)
            return
        with pytest.raises(Desync):
            self.consumer.apply(lie)
        self.broken = True

    def _after_a_loss(self, frame: wvp.WarpDiff) -> None:
        if self.consumer.phase is Phase.LIVE:  # the first diff after the lost one
            with pytest.raises(EpochGap):
                self.consumer.apply(frame)
        assert self.consumer.phase is Phase.DESYNCED
        assert self.consumer.apply(frame) is False

    @precondition(lambda self: self.broken)
    @rule(data=st.data())
    def next_diff_after_a_loss(self, data: st.DataObject) -> None:
        self._after_a_loss(self.producer.diff(self._ops(data)))

    @rule()
    def resync_with_a_snapshot(self) -> None:
        self.consumer.apply(self.producer.snapshot())
        self.broken = False

    @invariant()
    def live_means_exact(self) -> None:
        if self.consumer.phase is Phase.LIVE and not self.broken:
            assert self.consumer.epoch == self.producer.epoch
            assert self.consumer.graph == self.producer.graph


TestConsumerMachine = ConsumerMachine.TestCase
