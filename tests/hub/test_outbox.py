from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.hub import Outbox, OutboxLimits
from octosync.hub.outbox import OVERFLOW, QUEUED, WAS_EMPTY


def test_push_says_whether_the_connection_needs_waking() -> None:
    box = Outbox(OutboxLimits(max_frames=2))
    assert box.push(b"a") == WAS_EMPTY
    assert box.push(b"b") == QUEUED
    assert box.push(b"c") == OVERFLOW
    assert box.last_dropped == 3
    box.push_control(b"err")
    assert box.push(b"d") == QUEUED  # the control frame already woke it


def test_bounds_by_frames_drop_everything_and_report() -> None:
    box = Outbox(OutboxLimits(max_bytes=1000, max_frames=3))
    assert all(box.push(b"x") for _ in range(3))
    assert not box.push(b"y")
    assert box.dropped_frames == 4
    assert box.take() == []


def test_bounds_by_bytes_but_a_single_large_frame_always_fits_an_empty_queue() -> None:
    box = Outbox(OutboxLimits(max_bytes=10, max_frames=100))
    assert box.push(b"0123456789abc")
    assert not box.push(b"x")
    assert box.push(b"0123456789abc")
    assert box.take() == [b"0123456789abc"]


def test_control_frames_come_first_and_have_their_own_bound() -> None:
    box = Outbox(OutboxLimits(max_control_frames=2))
    box.push(b"d1")
    box.push_control(b"c1")
    box.push_control(b"c2")
    box.push_control(b"c3")
    assert box.dropped_control == 1
    assert box.take() == [b"c2", b"c3", b"d1"]


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        OutboxLimits(max_frames=0)


@given(
    st.integers(1, 64),
    st.integers(1, 8),
    st.lists(st.binary(min_size=0, max_size=40), max_size=60),
)
def test_memory_stays_bounded(max_bytes: int, max_frames: int, frames: list[bytes]) -> None:
    box = Outbox(OutboxLimits(max_bytes=max_bytes, max_frames=max_frames))
    largest = 0
    for f in frames:
        box.push(f)
        largest = max(largest, len(f))
        assert box.depth_frames <= max_frames
        assert box.depth_bytes <= max(max_bytes, largest)
