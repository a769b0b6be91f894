"""LWW-Map and OR-Map: convergence machines with HLC replicas, laws, TTL, GC."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from octosync.crdt import HLC, LWWMap, LWWRecord, MerkleTree, ORMap, Timestamp
from octosync.crdt.testing import ReplicaMachine

KEYS = st.sampled_from(["a", "b", "c", "d"])


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


class LWWMapMachine(ReplicaMachine[LWWMap]):
    def __init__(self) -> None:
        self.clock = Clock()
        self.writes: list[tuple[str, Any, Timestamp]] = []
        super().__init__()

    def new_replica(self, index: int) -> LWWMap:
        return LWWMap(HLC(f"n{index}", self.clock))

    def local_update(self, replica: LWWMap, index: int, data: st.DataObject) -> None:
        self.clock.now += data.draw(st.integers(0, 2))
        key = data.draw(KEYS)
        if data.draw(st.booleans()):
            rec = replica.set(key, data.draw(st.integers(0, 3)))
        else:
            rec = replica.remove(key)
        self.writes.append((key, rec.value, rec.timestamp))

    def merge_into(self, target: LWWMap, source: LWWMap) -> None:
        target.merge_map(source)

    def observe(self, replica: LWWMap) -> Any:
        return replica.state(), replica.merkle.root()

    def dominates(self, after: LWWMap, before_value: Any) -> bool:
        now = after.state()
        return all(k in now and now[k].timestamp >= r.timestamp for k, r in before_value[0].items())

    def teardown(self) -> None:
        super().teardown()
        # model: every key holds its newest write; the tree equals one built from scratch
        final = self.replicas[0]
        newest: dict[str, tuple[Timestamp, Any]] = {}
        for key, value, ts in self.writes:
            if key not in newest or ts > newest[key][0]:
                newest[key] = (ts, value)
        assert {k: (r.timestamp, r.value) for k, r in final.state().items()} == newest
        fresh = MerkleTree()
        for key, (ts, _) in newest.items():
            fresh.update(key, ts)
        assert fresh.root() == final.merkle.root()


class ORMapMachine(ReplicaMachine[ORMap]):
    def __init__(self) -> None:
        self.clock = Clock()
        super().__init__()

    def new_replica(self, index: int) -> ORMap:
        return ORMap(HLC(f"n{index}", self.clock))

    def local_update(self, replica: ORMap, index: int, data: st.DataObject) -> None:
        self.clock.now += data.draw(st.integers(0, 2))
        key = data.draw(KEYS)
        if data.draw(st.booleans()):
            replica.add(key, data.draw(st.integers(0, 3)))
        else:
            value = data.draw(st.one_of(st.none(), st.integers(0, 3)))
            replica.remove(key, value)

    def merge_into(self, target: ORMap, source: ORMap) -> None:
        target.merge_map(source)

    def observe(self, replica: ORMap) -> Any:
        return replica.state()

    def dominates(self, after: ORMap, before_value: Any) -> bool:
        live, tomb = after.state()
        # every tag seen before is still live or tombstoned; tombstones never vanish on merge
        before_live, before_tomb = before_value
        seen = {t for recs in before_live.values() for t, _ in recs}
        now = {t for recs in live.values() for t, _ in recs} | set(tomb)
        return seen <= now and set(before_tomb) <= set(tomb)


small = settings(max_examples=30, stateful_step_count=30)
TestLWWMapMachine = LWWMapMachine.TestCase
TestLWWMapMachine.settings = small
TestORMapMachine = ORMapMachine.TestCase
TestORMapMachine.settings = small


ops = st.lists(st.tuples(st.integers(0, 2), KEYS, st.booleans(), st.integers(0, 3)), max_size=12)


def build_or(history: list[tuple[int, str, bool, int]], clock: Clock) -> list[ORMap]:
    maps = [ORMap(HLC(f"n{i}", clock)) for i in range(3)]
    for who, key, add, value in history:
        clock.now += 1
        if add:
            maps[who].add(key, value)
        else:
            maps[who].remove(key, value)
    return maps


def join(*maps: ORMap) -> Any:
    out = ORMap(HLC("joiner", Clock()))
    for m in maps:
        out.merge_map(m)
    return out


@given(ops)
def test_or_map_merge_laws(history: list[tuple[int, str, bool, int]]) -> None:
    a, b, c = build_or(history, Clock())
    assert join(a, b).state() == join(b, a).state()
    assert join(join(a, b), c).state() == join(a, join(b, c)).state()
    ab = join(a, b)
    assert ab.merge_map(b) is False
    assert join(ab, ab).state() == ab.state()


def test_or_map_add_wins_and_sequential_model() -> None:
    clock = Clock()
    a, b = ORMap(HLC("a", clock)), ORMap(HLC("b", clock))
    a.add("k", 1)
    b.merge_map(a)
    clock.now += 1
    b.remove("k")  # removes the observed tag
    a.add("k", 2)  # concurrent add: unseen by b's remove
    a.merge_map(b)
    b.merge_map(a)
    assert a.get("k") == b.get("k") == [2]
    # sequential model on one replica: a multiset per key
    m = ORMap(HLC("s", clock))
    for v in (1, 1, 2):
        clock.now += 1
        m.add("x", v)
    m.remove("x", 1)
    assert m.get("x") == [2]
    m.remove("x")
    assert m.get("x") == []
    assert m.keys() == []


def test_or_map_tombstone_gc_by_watermark() -> None:
    clock = Clock()
    m = ORMap(HLC("a", clock))
    m.add("k", 1)
    clock.now = 2_000
    removed = m.remove("k")
    assert set(m.tombstones()) == set(removed)
    assert m.prune(Timestamp(2_000, 0, "a")) == []  # not yet older than the watermark
    assert m.prune(Timestamp(2_001, 0, "a")) == removed
    assert m.tombstones() == {}


def test_lww_map_ttl_tombstones_and_gc() -> None:
    clock = Clock()
    m = LWWMap(HLC("a", clock))
    m.set("s", "session", ttl_ms=100)
    m.set("p", "perm")
    assert m.get("s", now_ms=1_050) == "session"
    assert m.get("s", now_ms=1_100) is None
    assert m.items(now_ms=1_100) == {"p": "perm"}
    clock.now = 1_200
    m.remove("p")
    assert m.get("p") is None
    root_with_tombstone = m.merkle.root()
    # an older write arriving late cannot resurrect the key
    assert m.merge("p", LWWRecord("old", Timestamp(1_150, 0, "b"))) is False
    assert m.get("p") is None
    assert m.prune(Timestamp(1_200, 0, "a")) == []
    assert m.prune(Timestamp(1_300, 0, "a")) == ["p"]
    assert m.merkle.root() != root_with_tombstone
    assert len(m) == 1


def test_lww_map_merge_reports_value_changes_only() -> None:
    clock = Clock()
    a, b = LWWMap(HLC("a", clock)), LWWMap(HLC("b", clock))
    a.set("k", 1)
    clock.now += 1
    b.set("k", 1)
    assert a.merge_map(b) == 0  # newer timestamp, same value: nothing visible changed
    assert a.record("k") == b.record("k")
    clock.now += 1
    b.set("k", 2)
    assert a.merge_map(b) == 1


lww_ops = st.lists(
    st.tuples(st.integers(0, 2), KEYS, st.one_of(st.none(), st.integers(0, 3))), max_size=12
)


def build_lww(history: list[tuple[int, str, int | None]]) -> list[LWWMap]:
    clock = Clock()
    maps = [LWWMap(HLC(f"n{i}", clock)) for i in range(3)]
    for who, key, value in history:
        clock.now += 1
        if value is None:
            maps[who].remove(key)
        else:
            maps[who].set(key, value)
    return maps


def join_lww(*maps: LWWMap) -> LWWMap:
    out = LWWMap(HLC("joiner", Clock()))
    for m in maps:
        out.merge_map(m)
    return out


@given(lww_ops)
def test_lww_map_merge_laws(history: list[tuple[int, str, int | None]]) -> None:
    a, b, c = build_lww(history)
    assert join_lww(a, b).state() == join_lww(b, a).state()
    assert join_lww(join_lww(a, b), c).state() == join_lww(a, join_lww(b, c)).state()
    ab = join_lww(a, b)
    assert ab.merge_map(b) == 0
    assert join_lww(ab, ab).state() == ab.state()
    assert join_lww(a, b, c).merkle.root() == join_lww(c, b, a).merkle.root()
