from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.crdt import HLC, ClockDriftWarning, Timestamp
from octosync.crdt.hlc import MAX_COUNTER
from octosync.errors import ClockDrift, LocalProtocolError


class FakeClock:
    def __init__(self, now: int = 1_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def test_now_follows_wall_clock_and_counts_within_a_millisecond() -> None:
    clock = FakeClock(1_000)
    hlc = HLC("a", clock)
    assert hlc.now() == Timestamp(1_000, 0, "a")
    assert hlc.now() == Timestamp(1_000, 1, "a")
    clock.now = 990  # wall clock stepped back: logical time does not
    assert hlc.now() == Timestamp(1_000, 2, "a")
    clock.now = 1_005
    assert hlc.now() == Timestamp(1_005, 0, "a")


def test_update_rules() -> None:
    clock = FakeClock(1_000)
    hlc = HLC("a", clock)
    hlc.now()  # (1000, 0)
    # remote ahead: fast-forward to remote, counter + 1
    assert hlc.update(Timestamp(1_010, 4, "b")) == Timestamp(1_010, 5, "a")
    # same millis on both: max counter + 1
    assert hlc.update(Timestamp(1_010, 9, "b")) == Timestamp(1_010, 10, "a")
    # local ahead: counter + 1
    assert hlc.update(Timestamp(1_001, 50, "b")) == Timestamp(1_010, 11, "a")
    # wall clock ahead of both: reset counter
    clock.now = 2_000
    assert hlc.update(Timestamp(1_500, 3, "b")) == Timestamp(2_000, 0, "a")


def test_counter_overflow_rolls_into_next_millisecond() -> None:
    clock = FakeClock(1_000)
    hlc = HLC("a", clock)
    hlc.update(Timestamp(1_000, MAX_COUNTER - 1, "b"))
    assert hlc.last() == Timestamp(1_000, MAX_COUNTER, "a")
    assert hlc.now() == Timestamp(1_001, 0, "a")
    hlc2 = HLC("a", FakeClock(5))
    assert hlc2.update(Timestamp(5, MAX_COUNTER, "b")) == Timestamp(6, 0, "a")


def test_drift_strict_rejects_and_leaves_clock_unchanged() -> None:
    clock = FakeClock(10_000)
    hlc = HLC("a", clock, strict=True, max_drift_ms=100)
    before = hlc.now()
    with pytest.raises(ClockDrift) as info:
        hlc.update(Timestamp(10_101, 0, "b"))
    assert info.value.path == "timestamp.millis"
    assert "10101" in str(info.value)
    assert hlc.last() == before
    # exactly at the limit is fine
    assert hlc.update(Timestamp(10_100, 0, "b")) == Timestamp(10_100, 1, "a")


def test_drift_lenient_warns_and_accepts() -> None:
    hlc = HLC("a", FakeClock(0))
    with pytest.warns(ClockDriftWarning):
        got = hlc.update(Timestamp(60_001, 2, "b"))
    assert got == Timestamp(60_001, 3, "a")
    assert hlc.drift_events == 1


@pytest.mark.parametrize("bad", ["", "a:b"])
def test_node_id_without_colon(bad: str) -> None:
    with pytest.raises(LocalProtocolError):
        HLC(bad, FakeClock())


def test_order_is_millis_counter_then_node_bytes() -> None:
    assert Timestamp(1, 9, "z") < Timestamp(2, 0, "a")
    assert Timestamp(1, 1, "z") < Timestamp(1, 2, "a")
    assert Timestamp(1, 1, "B") < Timestamp(1, 1, "a")
    # code-point order equals UTF-8 byte order
    a, b = "\uffff", "\U00010000"
    assert (a < b) == (a.encode() < b.encode())
    assert Timestamp(1, 1, a) < Timestamp(1, 1, b)


events = st.lists(
    st.tuples(
        st.integers(0, 50),  # wall clock jitter
        st.one_of(st.none(), st.tuples(st.integers(0, 60), st.integers(0, 3))),
    ),
    max_size=40,
)


@given(events)
def test_every_timestamp_exceeds_everything_seen(
    evts: list[tuple[int, tuple[int, int] | None]],
) -> None:
    clock = FakeClock(0)
    hlc = HLC("me", clock, max_drift_ms=10**9)
    seen: list[Timestamp] = []
    for wall, remote in evts:
        clock.now = wall
        if remote is None:
            ts = hlc.now()
        else:
            r = Timestamp(remote[0], remote[1], "peer")
            ts = hlc.update(r)
            assert (ts.millis, ts.counter) > (r.millis, r.counter)
            seen.append(r)
        assert all((ts.millis, ts.counter) > (s.millis, s.counter) for s in seen)
        assert ts.millis >= wall
        seen.append(ts)
