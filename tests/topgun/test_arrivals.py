"""HTTP sync's arrival order: from any mark, exactly the keys changed since, in order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from octosync.crdt.sync_messages import WireTimestamp
from octosync.topgun.arrivals import Arrivals

KEYS = st.sampled_from(["a", "b", "c", "d", "e"])


@given(st.lists(KEYS, max_size=6), st.lists(KEYS, max_size=12), st.integers(1, 20))
def test_from_any_mark_exactly_what_changed_since(
    before: list[str], after: list[str], limit: int
) -> None:
    arrivals = Arrivals(boot=7)
    arrivals.follow("m", before)
    keys, mark = arrivals.since("m", WireTimestamp(0, 0, ""), 100)
    assert keys == sorted(set(before))  # a first sync: everything, in key order
    marks = [mark]
    for key in after:
        arrivals.written("m", [key])
        marks.append(arrivals.since("m", mark, 100)[1])
    for i, start in enumerate(marks):
        later = after[i:]
        expected = [k for j, k in enumerate(later) if k not in later[j + 1 :]]  # last write wins
        got: list[str] = []
        at = start
        while True:  # page by ``limit`` as a client polling would
            page, at = arrivals.since("m", at, limit)
            got += page
            if len(page) < limit:
                break
        assert got == expected
