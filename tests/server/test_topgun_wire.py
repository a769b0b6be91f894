"""The server's encoding of the TopGun core's typed messages: the fast shapes (an all-succeeded
``OP_ACK``, runs of events joined into one message) are byte for byte the plain encoding of
the message they stand for, and a run shared by several messages is encoded once."""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from octosync.crdt.sync_messages import WireLWWRecord, WireTimestamp
from octosync.server.topgun_wire import Encoder, data, encode
from octosync.topgun.effects import AllSucceeded, EventRun, EventRuns, Outbound
from octosync.wire import topgun as tg

_names = st.text(min_size=1, max_size=8)
_events = st.builds(
    lambda m, k, v, ms: tg.ServerEventPayload(
        m,
        "PUT",
        k,
        record=WireLWWRecord(msgspec.Raw(msgspec.msgpack.encode(v)), WireTimestamp(ms, 0, "n")),
    ),
    _names,
    _names,
    st.one_of(st.integers(-(2**40), 2**40), st.text(max_size=20), st.none()),
    st.integers(0, 2**48),
)
_runs = st.lists(st.lists(_events, max_size=5), min_size=1, max_size=5)


@given(_runs)
def test_joined_runs_are_the_events_message_they_stand_for(
    runs: list[list[tg.ServerEventPayload]],
) -> None:
    events = [e for run in runs for e in run]
    got = encode(EventRuns([EventRun(run) for run in runs]))
    if not events:
        return  # the core sends no message without events
    if len(events) == 1:
        want = tg.encode(tg.ServerEvent(events[0]))
    else:
        want = tg.encode(tg.ServerBatchEvent(tg.ServerBatchEventPayload(events)))
    assert got == want


@given(st.text(max_size=6), st.sampled_from(["MEMORY", "APPLIED", "PERSISTED"]), st.lists(_names))
def test_an_all_succeeded_ack_is_the_ack_with_a_result_per_op(
    last_id: str, level: str, ids: list[str]
) -> None:
    results = [tg.OpResult(i, True, level) for i in ids]
    want = tg.encode(tg.OpAck(tg.OpAckPayload(last_id, level, results)))
    assert encode(AllSucceeded(last_id, level, ids)) == want


def test_a_run_shared_by_messages_is_encoded_once() -> None:
    stamp = WireTimestamp(1, 0, "n")
    one = EventRun([tg.ServerEventPayload("m", "PUT", "k", record=WireLWWRecord(b"\x01", stamp))])
    enc = Encoder()
    first = enc(EventRuns([one]))
    one.events.append(tg.ServerEventPayload("m", "PUT", "j", record=WireLWWRecord(b"\x02", stamp)))
    assert enc(EventRuns([one])) == first  # remembered: the run's bytes, not encoded again
    assert Encoder()(EventRuns([one])) != first  # a new carry-out encodes it anew


def test_plain_messages_and_lists_of_them() -> None:
    ping = tg.Pong(timestamp=1, server_time=2)
    out = [Outbound((1,), ping), Outbound((1, 2), tg.Ping(timestamp=3))]
    assert data(out) == [tg.encode(ping), tg.encode(tg.Ping(timestamp=3))]
