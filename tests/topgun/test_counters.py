"""PN counters: any order and repetition of synced states converges to one value."""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from octosync.topgun.counters import Counter
from octosync.wire import topgun as tg
from tests.topgun.helpers import ALL, core, sent

_tallies = st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(0, 20), max_size=3)
_states = st.lists(st.tuples(_tallies, _tallies), max_size=8)


@given(_states, st.data())
def test_merging_in_any_order_with_repeats_converges(
    states: list[tuple[dict[str, int], dict[str, int]]], data: st.DataObject
) -> None:
    one, two = Counter(), Counter()
    for p, n in states:
        one.merge(p, n)
    shuffled = data.draw(st.permutations(states + states[: len(states) // 2]))
    for p, n in shuffled:
        two.merge(p, n)
    assert (one.positive, one.negative) == (two.positive, two.negative)
    expected = sum(max((p.get(k, 0) for p, _ in states), default=0) for k in "abc") - sum(
        max((n.get(k, 0) for _, n in states), default=0) for k in "abc"
    )
    assert one.value == expected


def test_sync_updates_every_subscriber_in_the_clients_shape() -> None:
    c = core()
    c.connect(1, ALL)
    c.connect(2, ALL)
    (resp,) = sent(c.handle(2, tg.CounterRequest(tg.CounterName("likes"))), 2)
    assert isinstance(resp, tg.CounterResponse)
    short = msgspec.msgpack.encode(
        {"type": "COUNTER_SYNC", "payload": {"name": "likes", "state": {"p": {"x": 2}, "n": {}}}}
    )
    fx = c.handle(1, tg.decode(short))
    for conn in (1, 2):
        (update,) = sent(fx, conn)
        assert isinstance(update, tg.CounterUpdate)
        raw = msgspec.msgpack.decode(tg.encode(update))
        assert raw["payload"]["state"] == {"positive": {"x": 2}, "negative": {}}
