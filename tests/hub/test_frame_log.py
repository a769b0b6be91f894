"""The shared frame log behaves, for every member, exactly like a private bounded outbox."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from octosync.hub import Outbox, OutboxLimits
from octosync.hub.frame_log import FrameLog
from octosync.hub.outbox import OVERFLOW, WAS_EMPTY

MEMBERS = ("a", "b", "c", "d")
LIMITS = OutboxLimits(max_bytes=40, max_frames=4)


def test_append_reports_caught_up_members_once_until_they_drain() -> None:
    log: FrameLog[str] = FrameLog(LIMITS)
    log.add("a")
    log.add("b")
    woken, lost = log.append(b"1")
    assert set(woken) == {"a", "b"}
    assert lost == []
    woken, lost = log.append(b"2")
    assert set(woken) == set()
    assert lost == []
    assert log.take_joined("a") == (b"12", 2)
    woken, _ = log.append(b"3")
    assert set(woken) == {"a"}
    assert log.take("b") == [b"1", b"2", b"3"]


def test_members_at_one_position_share_one_bytes_object() -> None:
    log: FrameLog[str] = FrameLog(LIMITS)
    for m in MEMBERS:
        log.add(m)
    log.append(b"x1")
    log.append(b"x2")
    first, n = log.take_joined("a")
    assert (first, n) == (b"x1x2", 2)
    assert all(log.take_joined(m)[0] is first for m in MEMBERS[1:])


def test_a_member_left_behind_by_the_bounds_is_reported_and_leaves() -> None:
    log: FrameLog[str] = FrameLog(OutboxLimits(max_bytes=1000, max_frames=2))
    log.add("slow")
    log.add("fast")
    log.append(b"1")
    assert log.take("fast") == [b"1"]
    log.append(b"2")
    _, lost = log.append(b"3")
    assert lost == [("slow", 3)]
    assert "slow" not in log
    assert log.take("slow") == []
    assert log.take("fast") == [b"2", b"3"]


def test_one_frame_larger_than_the_byte_bound_still_goes_out() -> None:
    log: FrameLog[str] = FrameLog(OutboxLimits(max_bytes=4, max_frames=10))
    log.add("a")
    _, lost = log.append(b"0123456789")
    assert lost == []
    assert log.take("a") == [b"0123456789"]


class FrameLogMatchesPrivateOutboxes(RuleBasedStateMachine):
    """Reference: one independent ``Outbox`` per member, fed every frame (the old fan-out)."""

    def __init__(self) -> None:
        super().__init__()
        self.log: FrameLog[str] = FrameLog(LIMITS)
        self.boxes: dict[str, Outbox] = {}

    @rule(member=st.sampled_from(MEMBERS))
    def add(self, member: str) -> None:
        self.log.add(member)
        self.boxes[member] = Outbox(LIMITS)

    @rule(member=st.sampled_from(MEMBERS))
    def remove(self, member: str) -> None:
        self.log.remove(member)
        self.boxes.pop(member, None)

    @rule(size=st.integers(1, 30), tag=st.integers(0, 255))
    def append(self, size: int, tag: int) -> None:
        frame = bytes([tag]) * size
        woken, lost = self.log.append(frame)
        woken = set(woken)
        expected_woken, expected_lost = set(), {}
        for member, box in list(self.boxes.items()):
            result = box.push(frame)
            if result == WAS_EMPTY:
                expected_woken.add(member)
            elif result == OVERFLOW:
                expected_lost[member] = box.last_dropped
                del self.boxes[member]
        assert woken == expected_woken
        assert dict(lost) == expected_lost
        assert len(lost) == len(expected_lost)

    @rule(member=st.sampled_from(MEMBERS), joined=st.booleans())
    def take(self, member: str, joined: bool) -> None:
        box = self.boxes.get(member)
        expected = [] if box is None else box.take()
        if joined:
            assert self.log.take_joined(member) == (b"".join(expected), len(expected))
        else:
            assert self.log.take(member) == expected

    @invariant()
    def backlogs_match(self) -> None:
        for member in MEMBERS:
            box = self.boxes.get(member)
            assert (member in self.log) == (box is not None)
            assert self.log.backlog(member) == (0 if box is None else box.depth_frames)
        assert self.log.total_backlog() == sum(b.depth_frames for b in self.boxes.values())

    @invariant()
    def log_holds_exactly_what_the_furthest_behind_member_needs(self) -> None:
        assert len(self.log) == max((b.depth_frames for b in self.boxes.values()), default=0)

    @invariant()
    def log_stays_within_its_bounds(self) -> None:
        assert len(self.log) <= LIMITS.max_frames
        assert len(self.log) <= 1 or self.log.size_bytes <= LIMITS.max_bytes


FrameLogMatchesPrivateOutboxes.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None
)
test_frame_log_matches_private_outboxes = FrameLogMatchesPrivateOutboxes.TestCase
