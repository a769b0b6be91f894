"""Publish / checkpoint / export / trim / crash / restart against the store and the hub.

The test keeps its own plain model of each stream (epoch, values, whether the hub can still
replay it) and of the journal's bookkeeping (which seqs hold whose frames, what the export and
the checkpoints cover). After every step a late joiner subscribes to every stream and must get
exactly the modelled state, whether the hub was restarted from the journal or not; every trim
is refused exactly when the model says it drops something unexported or uncovered.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from octosync.errors import SnapshotRequired, TrimRefused
from octosync.hub import Hub, HubConfig, OutFrame, ViewKey, lazily_frame
from octosync.hub.model import DiffFrame, Frame, Sent, SnapshotFrame
from octosync.ipc.messages import CellSet, Delta, NodeAdd, NodeSnapshot, Snapshot
from octosync.store.export import export, read_watermark
from octosync.store.hub_hook import frame_record
from octosync.store.journal import Journal
from octosync.store.records import EncodedRecord, StreamDropped, encode_record
from octosync.store.retention import JournalKeeper
from octosync.wire import DIALECTS, dialect, wvp
from octosync.wire.wvp import WarpDiff, WarpSnapshot

GRAPH, WARP = "scores", "warp:7"
STREAMS = (GRAPH, WARP)
MAX_DIFFS = 3
PRODUCER, WVP_PRODUCER, JOINER = 1, 2, 3
TTL = 300.0
VIEWS = {GRAPH: ViewKey("lazily", "t"), WARP: ViewKey("wvp", "wvp-t")}
PRODUCERS = {GRAPH: PRODUCER, WARP: WVP_PRODUCER}
CODECS = st.sampled_from([None, *sorted(DIALECTS)])
"""How a lazily frame reaches the journal: each dialect's own bytes, or built in-process."""


def graph_encoder(frame: OutFrame) -> bytes:
    return msgspec.msgpack.encode(frame.body)


def warp_encoder(frame: OutFrame) -> bytes:
    assert isinstance(frame.body, WarpSnapshot | WarpDiff)
    return wvp.encode_frame(frame.body)


_graph = msgspec.msgpack.Decoder(Snapshot | Delta)


@dataclass
class Expected:
    """What a late joiner must see: ``epoch`` None means nothing at all."""

    epoch: int | None = None
    values: dict[int, bytes] = field(default_factory=dict)
    diffs_since_snapshot: int = 0

    def visible(self) -> tuple[int | None, dict[int, bytes]]:
        if self.diffs_since_snapshot > MAX_DIFFS:  # the WVP replay log overflowed
            return None, {}
        return self.epoch, self.values


def joiner_view(stream: str, frames: list[bytes]) -> tuple[int | None, dict[int, bytes]]:
    """Apply what a late joiner received, the way its own mirror would."""
    epoch: int | None = None
    values: dict[int, bytes] = {}
    for raw in frames:
        if stream == GRAPH:
            msg = _graph.decode(raw)
            if isinstance(msg, Snapshot):
                epoch = msg.epoch
                values = {n.slot_id: n.payload for n in msg.nodes}  # type: ignore[misc]
            else:
                assert msg.base_epoch == epoch
                for op in msg.ops:
                    assert isinstance(op, CellSet | NodeAdd)
                    values[op.slot_id] = op.payload  # type: ignore[assignment]
                epoch = msg.epoch
            continue
        body = wvp.decode_frame(raw, opaque=False)
        if isinstance(body, WarpSnapshot):
            epoch, values = body.epoch, {int(k): v for k, v in body.graph.items()}
        else:
            assert body.from_epoch == epoch
            values[body.ops[0]] = body.ops[1]
            epoch = body.to_epoch
    return epoch, values


class RestartMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # A real SQLite file; on tmpfs when there is one, so the many fsyncs of a long history
        # (commits, checkpoints, export files) do not make the test wait on the disk.
        shm = Path("/dev/shm")
        where = str(shm) if shm.is_dir() else None
        self.dir = Path(tempfile.mkdtemp(prefix="restart-machine-", dir=where))
        self.data = self.dir / "data"
        self.export_dir = self.dir / "export"
        self.expected = {s: Expected() for s in STREAMS}
        self.frame_seqs: dict[str, list[int]] = {s: [] for s in STREAMS}
        self.covered: dict[str, int] = {}
        self.latest = 0
        self.restarts = 0
        self.now = 0.0
        self.journal = Journal(self.data, durability="normal")
        self._boot()

    # --- the "server" ---------------------------------------------------------------------

    # the hub's recorder, journaling synchronously (the server's goes through its writer)
    def prepare(self, stream: Any, conn: Any, frame: Frame[object]) -> Callable[[], None]:
        return partial(self.commit, encode_record(frame_record(stream, frame)))

    def prepare_drop(self, stream: Any) -> Callable[[], None]:
        return partial(self.commit, encode_record(StreamDropped(stream)))

    def commit(self, prepared: EncodedRecord) -> None:
        (seq,) = self.journal.append_encoded([prepared])
        self.latest = seq
        self.frame_seqs[prepared.scope].append(seq)  # a drop, like a frame, needs covering

    def _boot(self) -> None:
        self.hub = Hub(
            HubConfig(max_replay_diffs=MAX_DIFFS, retain_after_producer_leaves=TTL),
            clock=lambda: self.now,
            encoders={"t": graph_encoder, "wvp-t": warp_encoder},
            recorder=self,
        )
        self.keeper, _ = JournalKeeper.start(
            self.hub, self.data, export_dir=None, trim=False, durability="normal"
        )
        for stream, conn in PRODUCERS.items():
            self.hub.connect(conn, VIEWS[stream])
        self.has_snapshot: set[str] = set()

    def _lazily(self, msg: Snapshot | Delta, codec: str | None) -> Frame[object]:
        """A lazily frame as a face makes it: with the producer's bytes in ``codec`` (journaled
        as they are, decoded by recovery in that dialect), or built in-process (``None``)."""
        if codec is None:
            return lazily_frame(msg)
        return lazily_frame(msg, Sent(codec, dialect(codec).encode(msg)))

    def _publish(self, stream: str, frame: Frame[object]) -> None:
        self.hub.publish(PRODUCERS[stream], stream, frame)
        self.has_snapshot.add(stream)

    # --- rules ----------------------------------------------------------------------------

    @rule(
        stream=st.sampled_from(STREAMS),
        epoch=st.integers(0, 30),
        values=st.dictionaries(st.integers(1, 4), st.binary(max_size=3), max_size=3),
        codec=CODECS,
    )
    def publish_snapshot(
        self, stream: str, epoch: int, values: dict[int, bytes], codec: str | None
    ) -> None:
        if stream == GRAPH:
            nodes = tuple(NodeSnapshot(k, "b", "resolved", v) for k, v in sorted(values.items()))
            self._publish(stream, self._lazily(Snapshot(epoch, nodes), codec))
        else:
            snap = WarpSnapshot(epoch, {str(k): v for k, v in values.items()})
            self._publish(stream, SnapshotFrame(epoch, snap))
        self.expected[stream] = Expected(epoch, dict(values))

    @precondition(lambda self: self.has_snapshot)
    @rule(
        data=st.data(),
        node=st.integers(1, 6),
        value=st.binary(max_size=3),
        span=st.integers(1, 3),
        codec=CODECS,
    )
    def publish_delta(
        self, data: st.DataObject, node: int, value: bytes, span: int, codec: str | None
    ) -> None:
        stream = data.draw(st.sampled_from(sorted(self.has_snapshot)))
        exp = self.expected[stream]
        assert exp.epoch is not None
        base = exp.epoch
        if stream == GRAPH:
            op = CellSet(node, value) if node in exp.values else NodeAdd(node, "b", value)
            self._publish(stream, self._lazily(Delta(base, base + span, (op,)), codec))
            exp.epoch = base + span
        else:  # WVP diffs advance one epoch at a time
            diff = WarpDiff(base, base + 1, [node, value])
            self._publish(stream, DiffFrame(base, base + 1, diff))
            exp.epoch = base + 1
            exp.diffs_since_snapshot += 1
        exp.values[node] = value

    @rule()
    def checkpoint(self) -> None:
        self.keeper.round()
        for stream, seqs in self.frame_seqs.items():
            if seqs:
                self.covered[stream] = self.latest

    @rule()
    def export_all(self) -> None:
        export(self.journal, self.export_dir)
        assert read_watermark(self.export_dir) == self.latest

    @rule(data=st.data())
    def trim(self, data: st.DataObject) -> None:
        before = data.draw(st.integers(1, self.latest + 1), label="before")
        watermark = read_watermark(self.export_dir)
        exported_ok = before - 1 <= watermark
        covered_ok = all(
            self.covered.get(stream, 0) >= seq
            for stream, seqs in self.frame_seqs.items()
            for seq in seqs
            if seq < before
        )
        if exported_ok and covered_ok:
            self.journal.trim(before, exported_through=watermark)
            for stream in STREAMS:
                self.frame_seqs[stream] = [s for s in self.frame_seqs[stream] if s >= before]
        else:
            with pytest.raises(TrimRefused):
                self.journal.trim(before, exported_through=watermark)
        assert self.journal.latest_seq() == self.latest

    @rule(clean=st.booleans())
    def restart(self, clean: bool) -> None:
        """A crash (nothing shut down) or a clean stop, then a new hub recovered from disk."""
        if clean:
            for conn in PRODUCERS.values():
                self.hub.disconnect(conn)
        self.keeper.close()
        self.journal.close()
        self.journal = Journal(self.data, durability="normal")
        self._boot()
        self.restarts += 1

    @precondition(lambda self: self.has_snapshot)
    @rule(data=st.data())
    def producer_leaves_and_the_retention_passes(self, data: st.DataObject) -> None:
        """The hub drops the state; no restart may bring it back."""
        stream = data.draw(st.sampled_from(sorted(self.has_snapshot)))
        conn = PRODUCERS[stream]
        self.hub.disconnect(conn)
        self.now += TTL + 1
        assert self.hub.expire() == [stream]
        self.hub.connect(conn, VIEWS[stream])
        self.has_snapshot.discard(stream)
        self.expected[stream] = Expected()

    @precondition(lambda self: any(e.epoch is not None for e in self.expected.values()))
    @rule(stream=st.sampled_from(STREAMS))
    def restarted_producer_must_snapshot_first(self, stream: str) -> None:
        if stream in self.has_snapshot:
            return
        body = Delta(0, 1, ()) if stream == GRAPH else WarpDiff(0, 1, [1, b""])
        with pytest.raises(SnapshotRequired):
            self.hub.publish(PRODUCERS[stream], stream, DiffFrame(0, 1, body))

    # --- checks ---------------------------------------------------------------------------

    @invariant()
    def a_late_joiner_gets_the_acknowledged_state(self) -> None:
        for stream in STREAMS:
            self.hub.connect(JOINER, VIEWS[stream])
            try:
                self.hub.subscribe(JOINER, stream)
                got = joiner_view(stream, self.hub.take(JOINER))
                assert got == self.expected[stream].visible(), stream
            finally:
                self.hub.disconnect(JOINER)

    def teardown(self) -> None:
        self.keeper.close()
        self.journal.close()
        shutil.rmtree(self.dir, ignore_errors=True)


RestartMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=20, deadline=None)
test_restart_machine = RestartMachine.TestCase
