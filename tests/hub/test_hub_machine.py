"""A random history of producers, subscribers, stalls, resyncs and disconnects.

The test keeps its own plain model of what each stream must contain (owner, epoch, values) and
checks that the hub accepts exactly what the rules allow and that every subscriber, once it
drains its outbox, holds the stream's current state with no gap.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from octosync.errors import EpochGap, ForbiddenPublish, RemoteProtocolError, SnapshotRequired
from octosync.hub import Hub, HubConfig, OutboxLimits, OutFrame, ViewKey, lazily_frame
from octosync.ipc.messages import Delta, Snapshot
from tests.hub.helpers import RefSubscriber, cell_set, node_add, snap

CONNS = (1, 2, 3, 4)
STREAMS = ("a", "b")
MAX_FRAMES = 3
TTL = 5.0
_dec = msgspec.json.Decoder(Snapshot | Delta)


def tagged_encoder(frame: OutFrame) -> bytes:
    assert isinstance(frame.stream, str)
    return frame.stream.encode() + b"|" + msgspec.json.encode(frame.body)


@dataclass
class Expected:
    owner: int | None = None
    epoch: int | None = None
    values: dict[int, bytes] = field(default_factory=dict)
    expires: float | None = None


class HubMachine(RuleBasedStateMachine):
    coalesce = False

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.hub = Hub(
            HubConfig(
                outbox=OutboxLimits(max_bytes=100_000, max_frames=MAX_FRAMES),
                retain_after_producer_leaves=TTL,
                coalesce_backlog=self.coalesce,
            ),
            clock=lambda: self.now,
            encoders={"t": tagged_encoder},
        )
        self.expected = {s: Expected() for s in STREAMS}
        self.subs: dict[int, dict[str, RefSubscriber]] = {c: {} for c in CONNS}
        for c in CONNS:
            self.hub.connect(c, ViewKey("lazily", "t"))

    def _publish(self, conn: int, stream: str, msg: Snapshot | Delta) -> type[Exception] | None:
        try:
            self.hub.publish(conn, stream, lazily_frame(msg))
        except (ForbiddenPublish, SnapshotRequired, EpochGap, RemoteProtocolError) as exc:
            return type(exc)
        return None

    @rule(
        conn=st.sampled_from(CONNS),
        stream=st.sampled_from(STREAMS),
        epoch=st.integers(0, 50),
        values=st.dictionaries(st.integers(0, 5), st.binary(max_size=3), max_size=4),
    )
    def publish_snapshot(
        self, conn: int, stream: str, epoch: int, values: dict[int, bytes]
    ) -> None:
        exp = self.expected[stream]
        got = self._publish(conn, stream, snap(epoch, values))
        if exp.owner not in (None, conn):
            assert got is ForbiddenPublish
            return
        assert got is None
        exp.owner, exp.epoch, exp.values, exp.expires = conn, epoch, dict(values), None

    @rule(
        conn=st.sampled_from(CONNS),
        stream=st.sampled_from(STREAMS),
        skew=st.sampled_from([0, 0, 0, -1, 1]),
        slot=st.integers(0, 7),
        value=st.binary(max_size=3),
        add=st.booleans(),
    )
    def publish_delta(
        self, conn: int, stream: str, skew: int, slot: int, value: bytes, add: bool
    ) -> None:
        exp = self.expected[stream]
        base = max(0, (exp.epoch or 0) + skew)
        msg = node_add(base, slot, value) if add else cell_set(base, slot, value)
        got = self._publish(conn, stream, msg)
        if exp.owner not in (None, conn):
            assert got is ForbiddenPublish
        elif exp.owner is None or exp.epoch is None:
            assert got is SnapshotRequired
        elif base != exp.epoch:
            assert got is EpochGap
        elif (slot in exp.values) == add:
            # The state plane's rules: a node is added once, and only a node that exists is set.
            assert got is RemoteProtocolError
        else:
            assert got is None
            exp.epoch = base + 1
            exp.values[slot] = value

    @rule(stream=st.sampled_from(STREAMS), values=st.lists(st.binary(max_size=2), max_size=6))
    def owner_burst(self, stream: str, values: list[bytes]) -> None:
        """The owner publishes several valid deltas in a row (stalls subscribers that wait)."""
        exp = self.expected[stream]
        if exp.owner is None or exp.epoch is None:
            return
        for value in values:
            make = cell_set if 0 in exp.values else node_add
            assert self._publish(exp.owner, stream, make(exp.epoch, 0, value)) is None
            exp.epoch += 1
            exp.values[0] = value

    @rule(conn=st.sampled_from(CONNS), stream=st.sampled_from(STREAMS))
    def subscribe(self, conn: int, stream: str) -> None:
        self.hub.subscribe(conn, stream)
        self.subs[conn].setdefault(stream, RefSubscriber())

    @rule(conn=st.sampled_from(CONNS), stream=st.sampled_from(STREAMS))
    def resync(self, conn: int, stream: str) -> None:
        if stream in self.subs[conn]:
            self.hub.resync(conn, stream)

    @rule(conn=st.sampled_from(CONNS))
    def drain(self, conn: int) -> None:
        for raw in self.hub.take(conn):
            name, _, body = raw.partition(b"|")
            self.subs[conn][name.decode()].feed([body])
        for stream, ref in self.subs[conn].items():
            exp = self.expected[stream]
            if exp.epoch is None:
                continue
            assert ref.gaps == 0
            assert ref.epoch == exp.epoch, (stream, ref.epoch, exp.epoch)
            assert ref.values == exp.values

    @rule(conn=st.sampled_from(CONNS))
    def reconnect(self, conn: int) -> None:
        self.hub.disconnect(conn)
        self.subs[conn] = {}
        for exp in self.expected.values():
            if exp.owner == conn:
                exp.owner = None
                exp.expires = self.now + TTL
        self.hub.connect(conn, ViewKey("lazily", "t"))

    @precondition(lambda self: any(e.expires is not None for e in self.expected.values()))
    @rule(dt=st.floats(0.5, 6.0))
    def advance_clock(self, dt: float) -> None:
        self.now += dt
        gone = set(self.hub.expire())
        for name, exp in self.expected.items():
            if exp.expires is not None and self.now >= exp.expires:
                assert name in gone
                exp.epoch, exp.values, exp.expires = None, {}, None
            else:
                assert name not in gone

    @invariant()
    def hub_agrees_on_owner_and_epoch(self) -> None:
        for name, exp in self.expected.items():
            assert self.hub.producer_of(name) == exp.owner
            assert self.hub.epoch_of(name) == exp.epoch

    @invariant()
    def outboxes_stay_bounded(self) -> None:
        # The bound holds per subscription: each stream's shared log keeps at most MAX_FRAMES.
        assert self.hub.outbox_depth() <= MAX_FRAMES * len(CONNS) * len(STREAMS)


class CoalescingHubMachine(HubMachine):
    """The same history with backlogs collapsed to snapshots: subscribers still converge."""

    coalesce = True


HubMachine.TestCase.settings = settings(stateful_step_count=30, max_examples=60, deadline=None)
CoalescingHubMachine.TestCase.settings = settings(
    stateful_step_count=30, max_examples=40, deadline=None
)
TestHubMachine = HubMachine.TestCase
TestCoalescingHubMachine = CoalescingHubMachine.TestCase
