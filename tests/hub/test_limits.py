from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.errors import LimitExceeded, Oversize
from octosync.hub.limits import MAX_EPOCH, InputBudget, Limits


def test_frame_size_depends_on_authentication() -> None:
    limits = Limits(max_frame_bytes=100, max_preauth_frame_bytes=10)
    limits.check_frame_size(100)
    with pytest.raises(Oversize):
        limits.check_frame_size(101)
    limits.check_frame_size(10, authenticated=False)
    with pytest.raises(Oversize):
        limits.check_frame_size(11, authenticated=False)


def test_epoch_and_name_bounds() -> None:
    limits = Limits()
    limits.check_epoch(MAX_EPOCH)
    with pytest.raises(LimitExceeded) as err:
        limits.check_epoch(MAX_EPOCH + 1, "to_epoch")
    assert err.value.path == "to_epoch"
    limits.check_stream_name("s" * 256)
    for bad in ("", "s" * 257):
        with pytest.raises(LimitExceeded):
            limits.check_stream_name(bad)
    with pytest.raises(ValueError, match="max_epoch"):
        Limits(max_epoch=MAX_EPOCH + 1)


@given(
    sizes=st.lists(st.integers(0, 5000), min_size=1, max_size=200),
    gaps=st.lists(st.floats(0, 0.01), min_size=1, max_size=200),
)
def test_budget_waits_exactly_long_enough_to_hold_the_rate(
    sizes: list[int], gaps: list[float]
) -> None:
    """Honouring every wait the budget asks for never exceeds its rates (plus one burst)."""
    limits = Limits(frames_per_second=100.0, bytes_per_second=10_000.0)
    now = 0.0
    budget = InputBudget(limits, now)
    total_bytes = 0
    for i, size in enumerate(sizes):
        now += gaps[i % len(gaps)]
        now += budget.charge(size, now)
        total_bytes += size
    assert len(sizes) <= limits.frames_per_second * (1 + now) + 1e-6
    assert total_bytes <= limits.bytes_per_second * (1 + now) + 5000


@given(
    frames=st.lists(st.tuples(st.integers(0, 5000), st.integers(1, 50)), min_size=1, max_size=100),
    gaps=st.lists(st.floats(0, 0.01), min_size=1, max_size=100),
)
def test_a_frame_of_many_messages_is_charged_for_each(
    frames: list[tuple[int, int]], gaps: list[float]
) -> None:
    """Honouring every wait, the messages read (a BATCH's inner ones each) never exceed the
    frame rate (plus one burst and the last frame's messages)."""
    limits = Limits(frames_per_second=100.0, bytes_per_second=10_000_000.0)
    now = 0.0
    budget = InputBudget(limits, now)
    total = 0
    for i, (size, messages) in enumerate(frames):
        now += gaps[i % len(gaps)]
        now += budget.charge(size, now, messages)
        total += messages
    assert total <= limits.frames_per_second * (1 + now) + 1e-6
