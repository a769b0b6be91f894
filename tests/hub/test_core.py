from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from pathlib import Path

import msgspec
import pytest

from octosync.errors import (
    Desync,
    EpochGap,
    Forbidden,
    ForbiddenPublish,
    SnapshotRequired,
    StorageError,
)
from octosync.hub import (
    AllowAll,
    DiffFrame,
    Hub,
    HubConfig,
    OutboxLimits,
    OutFrame,
    SnapshotFrame,
    ViewKey,
    lazily_frame,
)
from octosync.hub.node_views import NodeRules, NodeView
from octosync.ipc.messages import (
    CellSet,
    Delta,
    NodeSnapshot,
    RemoteOp,
    RemoteOpResult,
    Snapshot,
)
from octosync.ipc.state_hash import snapshot_hash as default_state_hash
from octosync.wire import json_tagged
from tests.hub.helpers import RefSubscriber, cell_set, decode, json_encoder, node_add, snap

JSON = ViewKey("lazily", "json")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make_hub(**config: object) -> tuple[Hub, Clock, list[int]]:
    clock = Clock()
    woken: list[int] = []
    hub = Hub(HubConfig(**config), clock=clock, encoders={"json": json_encoder})  # type: ignore[arg-type]
    hub._test_woken = woken  # type: ignore[attr-defined]
    return hub, clock, woken


def join(hub: Hub, conn: int, woken: list[int], view: ViewKey = JSON) -> None:
    hub.connect(conn, view, wake=woken.append)


class DropRecorder:
    """Records frames and drops; ``full`` makes it refuse, as a journal whose queue is full."""

    def __init__(self) -> None:
        self.full = False
        self.records: list[tuple[str, object]] = []

    def prepare(self, stream: object, conn: object, frame: object) -> Callable[[], None]:
        return partial(self.commit, ("frame", stream))

    def prepare_drop(self, stream: object) -> Callable[[], None]:
        if self.full:
            raise StorageError("the journal writer is behind: its queue is full")
        return partial(self.commit, ("drop", stream))

    def commit(self, prepared: tuple[str, object]) -> None:
        self.records.append(prepared)


@pytest.mark.parametrize("ttl", [0.0, 10.0])
def test_a_drop_is_recorded_and_waits_while_the_recorder_has_no_room(ttl: float) -> None:
    recorder = DropRecorder()
    clock = Clock()
    hub = Hub(
        HubConfig(retain_after_producer_leaves=ttl),
        clock=clock,
        encoders={"json": json_encoder},
        recorder=recorder,
    )
    hub.connect(1, JSON)
    hub.connect(2, JSON)
    hub.publish(1, "s", lazily_frame(snap(4, {1: b"a"})))
    recorder.full = True
    hub.disconnect(1)
    clock.now = ttl
    assert hub.expire() == []  # kept: dropping it now would not survive a restart
    hub.subscribe(2, "s")
    assert [decode(b) for b in hub.take(2)] == [snap(4, {1: b"a"})]
    recorder.full = False
    assert hub.expire() == ["s"]
    assert recorder.records == [("frame", "s"), ("drop", "s")]
    hub.resync(2, "s")
    assert hub.take(2) == []


def test_first_publisher_owns_and_others_are_refused_without_fan_out() -> None:
    hub, _, woken = make_hub()
    for c in (1, 2, 3):
        join(hub, c, woken)
    hub.subscribe(3, "s")
    hub.publish(1, "s", lazily_frame(snap(0, {1: b"a"})))
    assert hub.producer_of("s") == 1
    first = hub.take(3)
    with pytest.raises(ForbiddenPublish):
        hub.publish(2, "s", lazily_frame(snap(5, {1: b"evil"})))
    with pytest.raises(ForbiddenPublish):
        hub.publish(2, "s", lazily_frame(cell_set(0, 1, b"evil")))
    assert hub.take(3) == []
    assert hub.epoch_of("s") == 0
    assert decode(first[0]) == snap(0, {1: b"a"})


def test_diff_before_snapshot_and_gap_are_rejected_and_change_nothing() -> None:
    hub, _, woken = make_hub()
    join(hub, 1, woken)
    join(hub, 2, woken)
    hub.subscribe(2, "s")
    with pytest.raises(SnapshotRequired):
        hub.publish(1, "s", lazily_frame(cell_set(0, 1, b"x")))
    assert hub.producer_of("s") is None
    hub.publish(1, "s", lazily_frame(snap(3, {1: b"a"})))
    with pytest.raises(EpochGap) as gap:
        hub.publish(1, "s", lazily_frame(cell_set(4, 1, b"x")))
    assert gap.value.path == "from_epoch"
    hub.publish(1, "w", SnapshotFrame(0, "opaque"))
    with pytest.raises(EpochGap):
        hub.publish(1, "w", DiffFrame(0, 2, "jump"))
    assert hub.epoch_of("s") == 3
    got = [decode(b) for b in hub.take(2)]
    assert got == [snap(3, {1: b"a"})]


def test_snapshot_resets_epoch_even_backwards() -> None:
    hub, _, woken = make_hub()
    join(hub, 1, woken)
    hub.publish(1, "s", lazily_frame(snap(10, {1: b"a"})))
    hub.publish(1, "s", lazily_frame(cell_set(10, 1, b"b")))
    hub.publish(1, "s", lazily_frame(snap(2, {1: b"z"})))
    assert hub.epoch_of("s") == 2
    hub.publish(1, "s", lazily_frame(cell_set(2, 1, b"y")))
    latest = hub.latest_snapshot("s")
    assert latest is not None
    assert latest.epoch == 3
    assert latest.nodes[0].payload == b"y"


def test_late_subscriber_gets_the_hubs_compacted_snapshot() -> None:
    hub, _, woken = make_hub()
    join(hub, 1, woken)
    hub.publish(1, "s", lazily_frame(snap(0, {1: b"a"})))
    hub.publish(1, "s", lazily_frame(cell_set(0, 1, b"b")))
    hub.publish(1, "s", lazily_frame(node_add(1, 2, b"c")))
    join(hub, 9, woken)
    hub.subscribe(9, "s")
    assert 9 in woken
    ref = RefSubscriber()
    batch = hub.take(9)
    assert len(batch) == 1
    ref.feed(batch)
    assert ref.epoch == 2
    assert ref.values == {1: b"b", 2: b"c"}
    hub.publish(1, "s", lazily_frame(cell_set(2, 2, b"d")))
    ref.feed(hub.take(9))
    assert ref.values == {1: b"b", 2: b"d"}
    assert ref.gaps == 0


def test_encode_once_per_view_same_bytes_object_for_every_subscriber() -> None:
    hub, _, woken = make_hub()
    calls: list[OutFrame] = []

    def counting(frame: OutFrame) -> bytes:
        calls.append(frame)
        return json_encoder(frame)

    hub.register_encoder("json2", counting)
    join(hub, 1, woken)
    hub.publish(1, "s", lazily_frame(snap(0, {1: b"a"})))
    for c in range(10, 20):
        join(hub, c, woken, ViewKey("lazily", "json2"))
        hub.subscribe(c, "s")
        hub.take(c)
    calls.clear()
    hub.publish(1, "s", lazily_frame(cell_set(0, 1, b"b")))
    batches = [hub.take(c) for c in range(10, 20)]
    assert len(calls) == 1
    assert all(b[0] is batches[0][0] for b in batches)


def test_permission_view_filters_before_encoding_and_keeps_the_epoch_chain() -> None:
    hub, _, woken = make_hub()
    rules = NodeRules(read=("#1",))
    hub.register_view(rules.view_name, lambda: NodeView(rules))
    join(hub, 1, woken)
    join(hub, 2, woken, ViewKey("lazily", "json", rules.view_name))
    hub.publish(1, "s", lazily_frame(snap(0, {1: b"a", 2: b"b"})))
    hub.subscribe(2, "s")
    ref = RefSubscriber()
    first = [decode(b) for b in hub.take(2)]
    assert first == [snap(0, {1: b"a"})]  # node 2 is not even named
    hub.publish(1, "s", lazily_frame(cell_set(0, 2, b"secret")))
    hub.publish(1, "s", lazily_frame(cell_set(1, 1, b"ok")))
    got = [decode(b) for b in hub.take(2)]
    assert got == [Delta(0, 2, (CellSet(1, b"ok"),))]  # one span over the hidden flush
    ref.feed([json_encoder(OutFrame("s", "snapshot", 0, first[0], 0))])
    ref.feed([json_encoder(OutFrame("s", "diff", 2, got[0], 0))])
    assert ref.gaps == 0
    assert ref.values == {1: b"ok"}
    hub.publish(1, "s", lazily_frame(cell_set(2, 2, b"more")))
    join(hub, 3, woken, ViewKey("lazily", "json", rules.view_name))
    hub.subscribe(3, "s")
    late = [decode(b) for b in hub.take(3)]
    assert late == [snap(2, {1: b"ok"})]  # where the view's log stands, not epoch 3
    hub.publish(1, "s", lazily_frame(cell_set(3, 1, b"again")))
    assert [decode(b) for b in hub.take(3)] == [Delta(2, 4, (CellSet(1, b"again"),))]
    assert [decode(b) for b in hub.take(2)] == [Delta(2, 4, (CellSet(1, b"again"),))]


def test_stalled_subscriber_is_reset_to_a_fresh_snapshot_others_unaffected() -> None:
    hub, _, woken = make_hub(outbox=OutboxLimits(max_bytes=10_000, max_frames=5))
    join(hub, 1, woken)
    join(hub, 2, woken)
    join(hub, 3, woken)
    hub.publish(1, "s", lazily_frame(snap(0, {1: b"0"})))
    fast, slow = RefSubscriber(), RefSubscriber()
    hub.subscribe(2, "s")
    hub.subscribe(3, "s")
    fast.feed(hub.take(2))
    slow.feed(hub.take(3))
    for e in range(20):
        hub.publish(1, "s", lazily_frame(cell_set(e, 1, str(e + 1).encode())))
        fast.feed(hub.take(2))  # the fast one drains every time
    assert hub.stats.resets >= 1
    assert hub.stats.drops >= 5
    batch = hub.take(3)
    assert len(batch) <= 5
    slow.feed(batch)
    assert fast.values == slow.values == {1: b"20"}
    assert fast.epoch == slow.epoch == 20
    assert fast.gaps == slow.gaps == 0


def test_resync_sends_a_snapshot_without_the_producer() -> None:
    hub, _, woken = make_hub()
    join(hub, 1, woken)
    join(hub, 2, woken)
    hub.publish(1, "s", lazily_frame(snap(0, {1: b"a"})))
    hub.subscribe(2, "s")
    hub.take(2)
    hub.take(1)
    hub.publish(1, "s", lazily_frame(cell_set(0, 1, b"b")))
    hub.resync(2, "s")
    frames = [decode(b) for b in hub.take(2)]
    assert isinstance(frames[-1], Snapshot)
    assert frames[-1].epoch == 1
    assert hub.take(1) == []
    with pytest.raises(Forbidden):
        hub.resync(1, "other")


def test_producer_disconnect_releases_and_keeps_state_until_ttl() -> None:
    hub, clock, woken = make_hub(retain_after_producer_leaves=10.0)
    join(hub, 1, woken)
    hub.publish(1, "s", lazily_frame(snap(4, {1: b"a"})))
    hub.disconnect(1)
    assert hub.producer_of("s") is None
    join(hub, 2, woken)
    hub.subscribe(2, "s")
    assert [decode(b) for b in hub.take(2)] == [snap(4, {1: b"a"})]
    with pytest.raises(SnapshotRequired):
        hub.publish(2, "s", lazily_frame(cell_set(4, 1, b"b")))
    clock.now = 9.9
    assert hub.expire() == []
    clock.now = 10.0
    assert hub.expire() == ["s"]
    hub.resync(2, "s")
    assert hub.take(2) == []
    hub.publish(2, "s", lazily_frame(snap(0, {1: b"new owner"})))
    assert hub.producer_of("s") == 2


def test_zero_ttl_drops_state_at_once() -> None:
    hub, _, woken = make_hub(retain_after_producer_leaves=0)
    join(hub, 1, woken)
    hub.publish(1, "s", lazily_frame(snap(4, {1: b"a"})))
    hub.disconnect(1)
    assert hub.stream_ids() == []


def test_state_hash_mismatch_is_desync_to_the_producer_and_not_fanned_out() -> None:
    hub, _, woken = make_hub()
    join(hub, 1, woken)
    join(hub, 2, woken)
    base = snap(0, {1: b"a"})
    hub.publish(1, "s", lazily_frame(base))
    hub.subscribe(2, "s")
    hub.take(2)
    good = Delta(0, 1, (CellSet(1, b"b"),), state_hash=default_state_hash(snap(1, {1: b"b"})))
    hub.publish(1, "s", lazily_frame(good))
    bad = Delta(1, 2, (CellSet(1, b"c"),), state_hash=default_state_hash(snap(2, {1: b"zzz"})))
    with pytest.raises(Desync) as err:
        hub.publish(1, "s", lazily_frame(bad))
    assert err.value.path == "state_hash"
    assert [decode(b) for b in hub.take(2)] == [good]
    assert hub.epoch_of("s") == 1
    latest = hub.latest_snapshot("s")
    assert latest is not None
    assert latest.nodes[0].payload == b"b"


def test_writes_go_to_the_producer_only_when_granted() -> None:
    class ReadOnly:
        def allows(self, stream: object, action: str) -> bool:
            return action == "read"

    hub, _, woken = make_hub()
    join(hub, 1, woken)
    join(hub, 2, woken)
    hub.connect(3, JSON, grants=ReadOnly(), wake=woken.append)
    hub.publish(1, "s", lazily_frame(snap(0, {1: b"a"})))
    hub.take(1)
    write = cell_set(0, 1, b"w")
    assert hub.write(2, "s", write) == 1
    assert [decode(b) for b in hub.take(1)] == [write]
    with pytest.raises(Forbidden):
        hub.write(3, "s", write)
    with pytest.raises(Forbidden):
        hub.publish(3, "t", lazily_frame(snap(0, {})))
    assert hub.take(1) == []


def test_remote_ops_reach_a_producer_that_takes_them_stamped_else_as_cell_sets() -> None:
    hub, _, woken = make_hub()
    hub.register_encoder("any", lambda f: msgspec.json.encode(f.body))
    hub.connect(1, ViewKey("lazily", "any"), wake=woken.append)
    join(hub, 2, woken, ViewKey("lazily", "any"))
    hub.publish(1, "s", lazily_frame(snap(0, {1: b"a"})))
    hub.subscribe(2, "s")
    hub.take(1)
    hub.take(2)
    op = RemoteOp("write", 1, b"w", request=4)
    assert hub.remote_op(2, "s", op, "alice") is False  # the older form: no answer comes
    assert msgspec.json.decode(hub.take(1)[0], type=Delta) == cell_set(0, 1, b"w")
    with pytest.raises(Forbidden, match="no trigger_effect requests"):
        hub.remote_op(2, "s", RemoteOp("trigger_effect", 9), "alice")
    hub.take_remote_ops(1)
    assert hub.remote_op(2, "s", op, "alice") is True
    forwarded = msgspec.json.decode(hub.take(1)[0], type=RemoteOp)
    assert forwarded == RemoteOp("write", 1, b"w", 4, peer=2, subject="alice")
    hub.write(2, "s", cell_set(0, 1, b"v"), "alice")  # a cell_set write, stamped the same way
    assert msgspec.json.decode(hub.take(1)[0], type=RemoteOp) == RemoteOp(
        "write", 1, b"v", 0, peer=2, subject="alice"
    )
    with pytest.raises(Forbidden, match="only the producer"):
        hub.answer(2, "s", RemoteOpResult(4, peer=2))
    assert hub.answer(1, "s", RemoteOpResult(4, peer=2, error="Forbidden", message="no")) is True
    answer = msgspec.json.decode(hub.take(2)[-1], type=RemoteOpResult)
    assert answer == RemoteOpResult(4, error="Forbidden", message="no")  # peer stripped
    assert hub.answer(1, "s", RemoteOpResult(5, peer=77)) is False  # nobody to tell


def test_node_grants_refuse_writes_by_key_before_the_producer_hears_of_them() -> None:
    class Narrow:
        def allows(self, stream: object, action: str) -> bool:
            return True

        def node_rules(self, stream: object) -> NodeRules:
            return NodeRules(read=("*",), write=("mine/*",))

    hub, _, woken = make_hub()
    join(hub, 1, woken)
    hub.connect(2, JSON, grants=Narrow(), wake=woken.append)
    keyed = Snapshot(
        0,
        (
            NodeSnapshot(1, "bytes", "resolved", b"a", "mine/x"),
            NodeSnapshot(2, "bytes", "resolved", b"b", "theirs/y"),
        ),
    )
    hub.publish(1, "s", lazily_frame(keyed))
    hub.take(1)
    hub.write(2, "s", cell_set(0, 1, b"ok"))
    assert len(hub.take(1)) == 1
    with pytest.raises(Forbidden, match="theirs/y") as refused:
        hub.write(2, "s", Delta(0, 1, (CellSet(1, b"ok"), CellSet(2, b"no"))))
    assert refused.value.path == "ops[1]"
    with pytest.raises(Forbidden, match="#9"):
        hub.remote_op(2, "s", RemoteOp("trigger_effect", 9))
    assert hub.take(1) == []  # a refused batch forwards none of it


def test_check_join_refuses_what_subscribe_and_publish_would() -> None:
    class ReadOnly:
        def allows(self, stream: object, action: str) -> bool:
            return action == "read"

    hub, _, woken = make_hub()
    join(hub, 1, woken)
    everyone = AllowAll()
    hub.check_join(everyone, "s", publish=True)  # no producer yet: anyone granted may
    hub.check_join(ReadOnly(), "s", publish=False)
    with pytest.raises(Forbidden, match="not granted publish"):
        hub.check_join(ReadOnly(), "s", publish=True)
    hub.publish(1, "s", lazily_frame(snap(0, {1: b"a"})))
    with pytest.raises(ForbiddenPublish, match="another connection"):
        hub.check_join(everyone, "s", publish=True)
    hub.check_join(everyone, "s", publish=False)
    hub.disconnect(1)
    hub.check_join(everyone, "s", publish=True)  # the producer left: the stream is free again


def test_on_accept_hook_sees_only_accepted_frames() -> None:
    seen: list[tuple[object, int, object]] = []
    hub = Hub(
        clock=Clock(),
        encoders={"json": json_encoder},
        on_accept=lambda s, c, f: seen.append((s, c, f)),
    )
    hub.connect(1, JSON)
    hub.connect(2, JSON)
    f0 = lazily_frame(snap(0, {1: b"a"}))
    hub.publish(1, "s", f0)
    with pytest.raises(ForbiddenPublish):
        hub.publish(2, "s", f0)
    with pytest.raises(EpochGap):
        hub.publish(1, "s", lazily_frame(cell_set(7, 1, b"x")))
    assert seen == [("s", 1, f0)]


@pytest.mark.parametrize("ttl", [None, 0.0, 5.0])
def test_on_release_hook_names_only_the_streams_the_leaving_connection_produced(
    ttl: float | None,
) -> None:
    released: list[tuple[object, int]] = []
    hub = Hub(
        HubConfig(retain_after_producer_leaves=ttl),
        clock=Clock(),
        encoders={"json": json_encoder},
        on_release=lambda s, c: released.append((s, c)),
    )
    for conn in (1, 2):
        hub.connect(conn, JSON)
    hub.publish(1, "a", lazily_frame(snap(0, {1: b"a"})))
    hub.publish(1, "b", lazily_frame(snap(0, {1: b"b"})))
    hub.publish(2, "c", lazily_frame(snap(0, {1: b"c"})))
    hub.subscribe(1, "c")
    hub.disconnect(2)
    assert released == [("c", 2)]
    hub.disconnect(1)
    assert sorted(released) == [("a", 1), ("b", 1), ("c", 2)]
    hub.disconnect(1)  # twice: nothing more
    assert len(released) == 3


def test_on_interest_hook_sees_a_streams_first_subscriber_and_its_last_leaving() -> None:
    seen: list[tuple[object, bool]] = []
    hub = Hub(
        clock=Clock(),
        encoders={"json": json_encoder},
        on_interest=lambda s, wanted: seen.append((s, wanted)),
    )
    for conn in (1, 2, 3):
        hub.connect(conn, JSON)
    hub.subscribe(1, "s")  # before the stream exists: a node may have to fetch it
    hub.subscribe(2, "s")
    hub.subscribe(2, "s")
    hub.subscribe(2, "t")
    assert seen == [("s", True), ("t", True)]
    hub.publish(3, "s", lazily_frame(snap(0, {1: b"a"})))  # a producer is no subscriber
    hub.unsubscribe(1, "s")
    hub.unsubscribe(1, "s")
    assert seen == [("s", True), ("t", True)]
    hub.disconnect(2)
    assert sorted(seen[2:]) == [("s", False), ("t", False)]
    hub.disconnect(3)
    hub.subscribe(1, "s")
    assert seen[-1] == ("s", True)
    assert len(seen) == 5


def test_a_stream_produced_on_another_node_refuses_producers_here_but_its_stand_in() -> None:
    owners = {"s": "n1"}
    hub, _, woken = make_hub()
    hub.register_remote_owners(lambda s, c: None if c == 9 else owners.get(str(s)))
    for conn in (1, 9):
        join(hub, conn, woken)
    with pytest.raises(ForbiddenPublish, match="node 'n1'"):
        hub.publish(1, "s", lazily_frame(snap(0, {1: b"a"})))
    with pytest.raises(ForbiddenPublish):
        hub.check_join(AllowAll(), "s", publish=True)
    assert hub.stream_ids() == []
    hub.publish(9, "s", lazily_frame(snap(0, {1: b"n1's"})))  # the owner's stand-in
    hub.publish(1, "t", lazily_frame(snap(0, {1: b"b"})))
    owners["t"] = "n2"  # known only after this node's producer was accepted: it stays
    hub.publish(1, "t", lazily_frame(cell_set(0, 1, b"c")))
    assert (hub.producer_of("s"), hub.producer_of("t")) == (9, 1)


def test_replay_model_keeps_snapshot_plus_diffs_and_goes_stale_past_bound() -> None:
    encoded: list[OutFrame] = []

    def enc(frame: OutFrame) -> bytes:
        encoded.append(frame)
        return repr((frame.kind, frame.epoch, frame.body)).encode()

    hub = Hub(HubConfig(max_replay_diffs=3), clock=Clock(), encoders={"raw": enc})
    hub.connect(1, ViewKey("lazily", "raw"))
    hub.publish(1, 7, SnapshotFrame(0, "g0"))
    for e in range(2):
        hub.publish(1, 7, DiffFrame(e, e + 1, f"d{e}"))
    hub.connect(2, ViewKey("lazily", "raw"))
    hub.subscribe(2, 7)
    got = hub.take(2)
    assert got == [b"('snapshot', 0, 'g0')", b"('diff', 1, 'd0')", b"('diff', 2, 'd1')"]
    for e in range(2, 6):
        hub.publish(1, 7, DiffFrame(e, e + 1, f"d{e}"))
    assert hub.needs_snapshot(7)
    assert len(hub.take(2)) == 4  # live subscriber keeps receiving
    hub.connect(3, ViewKey("lazily", "raw"))
    hub.subscribe(3, 7)
    assert hub.take(3) == []  # cannot replay without a gap: waits
    hub.publish(1, 7, DiffFrame(6, 7, "d6"))
    assert hub.take(3) == []
    hub.publish(1, 7, SnapshotFrame(7, "g7"))
    assert hub.take(3) == [b"('snapshot', 7, 'g7')"]
    assert not hub.needs_snapshot(7)


def test_replay_of_is_what_a_new_subscriber_starts_from() -> None:
    """The cluster answers a snapshot request with it: a replayed stream's last snapshot and
    the diffs since (none once the log overflowed), a lazily stream's current snapshot."""
    hub = Hub(HubConfig(max_replay_diffs=2), clock=Clock(), encoders={"json": json_encoder})
    hub.connect(1, JSON)
    assert hub.replay_of(7) == []
    hub.publish(1, 7, SnapshotFrame(4, "g4"))
    hub.publish(1, 7, DiffFrame(4, 5, "d4"))
    assert hub.replay_of(7) == [SnapshotFrame(4, "g4"), DiffFrame(4, 5, "d4")]
    hub.publish(1, 7, DiffFrame(5, 6, "d5"))
    hub.publish(1, 7, DiffFrame(6, 7, "d6"))
    assert hub.replay_of(7) == []
    hub.publish(1, "s", lazily_frame(snap(1, {1: b"a"})))
    hub.publish(1, "s", lazily_frame(cell_set(1, 1, b"b")))
    (only,) = hub.replay_of("s")
    assert isinstance(only, SnapshotFrame)
    assert only.body == hub.latest_snapshot("s")


def test_ts_is_monotonic_across_streams() -> None:
    stamps: list[int] = []

    def enc(frame: OutFrame) -> bytes:
        stamps.append(frame.ts)
        return b"x"

    hub = Hub(clock=Clock(), encoders={"raw": enc})
    hub.connect(1, ViewKey("lazily", "raw"))
    hub.connect(2, ViewKey("lazily", "raw"))
    hub.subscribe(2, "a")
    hub.subscribe(2, "b")
    hub.take(2)
    for i in range(3):
        hub.publish(1, "a", SnapshotFrame(i, "x"))
        hub.publish(1, "b", SnapshotFrame(i, "y"))
    assert stamps == sorted(stamps)
    assert len(set(stamps)) == len(stamps)


def test_backlog_collapses_to_one_snapshot_per_the_reliable_sync_fixture(
    vectors_dir: Path,
) -> None:
    doc = json.loads((vectors_dir / "lazily/reliable-sync/coalesce_bounds_outbox.json").read_text())
    scenario = next(s for s in doc["scenarios"] if s["id"] == "state_suffix_collapses_to_snapshot")
    appended = [json_tagged.decode(json.dumps({"Delta": d}).encode()) for d in scenario["appended"]]
    expected = {
        n["node"]: bytes(n["payload"]["Inline"])
        for n in scenario["coalesce"]["wire"]["Snapshot"]["nodes"]
    }
    hub, _, woken = make_hub(coalesce_backlog=True)
    join(hub, 1, woken)
    join(hub, 2, woken)  # stalled: never takes while the deltas arrive
    join(hub, 3, woken)  # a second stalled subscriber, to show the snapshot bytes are shared
    hub.publish(1, "s", lazily_frame(snap(0, {1: b"\x00", 2: b"\x00"})))
    hub.subscribe(2, "s")
    hub.subscribe(3, "s")
    assert len(hub.take(2)) == len(hub.take(3)) == 1
    for d in appended:
        hub.publish(1, "s", lazily_frame(d))
    batch, other = hub.take(2), hub.take(3)
    assert len(batch) == scenario["retained_after"] == 1
    assert batch[0] is other[0]
    collapsed = decode(batch[0])
    assert isinstance(collapsed, Snapshot)
    assert collapsed.epoch == scenario["expect"]["receiver_last_epoch_after"]
    assert {n.slot_id: n.payload for n in collapsed.nodes} == expected
    assert hub.stats.coalesced == 2 * scenario["retained_before"]


def test_backlog_is_kept_when_the_snapshot_would_be_bigger() -> None:
    hub, _, woken = make_hub(coalesce_backlog=True)
    join(hub, 1, woken)
    join(hub, 2, woken)
    big = {i: b"x" * 100 for i in range(20)}
    hub.publish(1, "s", lazily_frame(snap(0, big)))
    hub.subscribe(2, "s")
    hub.take(2)
    hub.publish(1, "s", lazily_frame(cell_set(0, 1, b"a")))
    hub.publish(1, "s", lazily_frame(cell_set(1, 1, b"b")))
    assert [type(decode(b)) for b in hub.take(2)] == [Delta, Delta]
    assert hub.stats.coalesced == 0


def test_caught_up_subscribers_share_one_write_buffer_and_are_woken_once() -> None:
    hub, _, woken = make_hub()
    join(hub, 1, woken)
    subs = list(range(2, 8))
    for c in subs:
        join(hub, c, woken)
        hub.subscribe(c, "s")
    hub.publish(1, "s", lazily_frame(snap(0, {1: b"a"})))
    for c in subs:
        data, frames = hub.take_bytes(c)
        assert frames == 1
        assert decode(data) == snap(0, {1: b"a"})
    woken.clear()
    for e in range(3):
        hub.publish(1, "s", lazily_frame(cell_set(e, 1, bytes([e]))))
    assert sorted(woken) == subs  # one wake per subscriber for the three deltas
    hub.send_control(7, b"control")
    per_frame = hub.take(2)
    assert [decode(b) for b in per_frame] == [cell_set(e, 1, bytes([e])) for e in range(3)]
    shared = [hub.take_bytes(c) for c in subs[1:-1]]
    assert all(data is shared[0][0] for data, _ in shared)
    assert shared[0] == (b"".join(per_frame), 3)
    data, frames = hub.take_bytes(7)
    assert (data, frames) == (b"control" + b"".join(per_frame), 4)
    assert hub.take_bytes(2) == (b"", 0)


def test_a_subscriber_changing_view_restarts_from_a_snapshot_in_the_new_dialect() -> None:
    hub, _, woken = make_hub()
    hub.register_encoder("alt", lambda f: b"alt:" + json_encoder(f))
    join(hub, 1, woken)
    join(hub, 2, woken)
    join(hub, 3, woken)
    hub.publish(1, "s", lazily_frame(snap(0, {1: b"a"})))
    hub.subscribe(2, "s")
    hub.subscribe(3, "s")
    hub.take(2)
    hub.take(3)
    hub.publish(1, "s", lazily_frame(cell_set(0, 1, b"b")))
    hub.change_view(2, ViewKey("lazily", "alt"))
    hub.publish(1, "s", lazily_frame(cell_set(1, 1, b"c")))
    batch = hub.take(2)
    assert all(b.startswith(b"alt:") for b in batch)
    got = [decode(b[4:]) for b in batch]
    assert isinstance(got[0], Snapshot)
    assert got[0].epoch == 2
    assert len(got) == 1
    hub.publish(1, "s", lazily_frame(cell_set(2, 1, b"d")))
    assert [decode(b[4:]) for b in hub.take(2)] == [cell_set(2, 1, b"d")]
    # the other subscriber's json log was not disturbed
    assert [decode(b) for b in hub.take(3)] == [
        cell_set(0, 1, b"b"),
        cell_set(1, 1, b"c"),
        cell_set(2, 1, b"d"),
    ]


def test_map_streams_are_the_servers_and_read_only_for_peers() -> None:
    hub, clock, woken = make_hub(retain_after_producer_leaves=1.0)
    for c in (1, 2):
        join(hub, c, woken)
    with pytest.raises(ForbiddenPublish):  # even before the server produced it
        hub.publish(1, "map:users", lazily_frame(snap(0, {1: b"evil"})))
    with pytest.raises(ForbiddenPublish):
        hub.check_join(AllowAll(), "map:users", publish=True)
    hub.check_join(AllowAll(), "map:users", publish=False)
    hub.subscribe(2, "map:users")
    hub.publish_from_server("map:users", lazily_frame(snap(0, {1: b"a"})))
    hub.publish_from_server("map:users", lazily_frame(cell_set(0, 1, b"b")))
    sub = RefSubscriber()
    sub.feed(hub.take(2))
    assert (sub.epoch, sub.values) == (1, {1: b"b"})
    with pytest.raises(ForbiddenPublish):
        hub.publish(1, "map:users", lazily_frame(cell_set(1, 1, b"evil")))
    with pytest.raises(Forbidden):
        hub.write(2, "map:users", cell_set(1, 1, b"evil"))
    clock.now += 10
    assert hub.expire() == []  # the server never leaves: its state is kept
    assert hub.epoch_of("map:users") == 1
    hub.publish(1, "users", lazily_frame(snap(0, {1: b"mine"})))  # other names stay open
