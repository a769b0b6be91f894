"""What maps and documents share in crossing the cluster: the position taken, the rounds."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from octosync.cluster.rounds import Position, Rounds


@given(
    st.dictionaries(st.integers(1, 30), st.sampled_from(["me", "other", "me-before"])),
    st.data(),
)
def test_a_position_admits_each_sequence_once_and_never_its_own(
    stream: dict[int, str], data: st.DataObject
) -> None:
    """``stream``: who published each sequence; delivered in any order, some more than once."""
    seqs = data.draw(st.lists(st.sampled_from(sorted(stream)), max_size=40)) if stream else []
    position = Position("me", position=3)
    admitted: list[int] = []
    for seq in seqs:
        highest = position.position
        if position.admit(seq, stream[seq]):
            admitted.append(seq)
        assert position.position == max(highest, seq)
    assert admitted == sorted(set(admitted))  # increasing: none twice, none going back
    assert all(seq > 3 for seq in admitted)  # nothing at or below the journaled position
    assert all(stream[seq] != "me" for seq in admitted)  # never this process's own
    first_past = [s for i, s in enumerate(seqs) if s > max([3, *seqs[:i]])]
    assert admitted == [s for s in first_past if stream[s] != "me"]


def test_rounds_leave_out_what_was_written_lately_and_come_once_per_interval() -> None:
    now = [0.0]
    rounds = Rounds("a", lambda: now[0], interval=10.0, settle=2.0)
    assert not rounds.due()
    rounds.written(["doc"])
    assert not rounds.settled("doc")
    assert rounds.settled("other")
    now[0] = 2.0
    assert rounds.settled("doc")
    now[0] = 10.0
    assert rounds.due()
    assert not rounds.due()  # not again before the next interval
    now[0] = 20.0
    assert rounds.due()
