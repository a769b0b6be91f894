from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from octosync.crdt import LWWRegister, MVRegister, PNCounter, Timestamp
from octosync.crdt.testing import ReplicaMachine, timestamps

writes = st.lists(st.tuples(st.integers(0, 3), timestamps()), max_size=6)


def lww_from(ws: list[tuple[int, Timestamp]]) -> LWWRegister[int]:
    reg: LWWRegister[int] = LWWRegister()
    for value, ts in ws:
        reg.set(value, ts)
    return reg


def merged(*regs: LWWRegister[int]) -> tuple[Any, Any]:
    out: LWWRegister[int] = LWWRegister()
    for r in regs:
        out.merge(r)
    return out.state()


@given(writes, writes, writes)
def test_lww_register_merge_laws(a: Any, b: Any, c: Any) -> None:
    ra, rb, rc = lww_from(a), lww_from(b), lww_from(c)
    assert merged(ra, rb) == merged(rb, ra)
    assert merged(merged_reg(ra, rb), rc) == merged(ra, merged_reg(rb, rc))
    twice = lww_from(a)
    assert twice.merge(ra) is False
    assert twice.state() == ra.state()
    # the winner is the write with the greatest timestamp, as a model
    all_writes = a + b + c
    if all_writes:
        top = max(ts for _, ts in all_writes)
        assert merged(ra, rb, rc)[1] == top


def merged_reg(x: LWWRegister[int], y: LWWRegister[int]) -> LWWRegister[int]:
    out: LWWRegister[int] = LWWRegister()
    out.merge(x)
    out.merge(y)
    return out


def test_lww_register_equal_value_reports_no_change() -> None:
    reg = LWWRegister(5, Timestamp(1, 0, "a"))
    assert reg.merge(LWWRegister(5, Timestamp(2, 0, "b"))) is False
    assert reg.ts == Timestamp(2, 0, "b")
    assert reg.merge(LWWRegister(6, Timestamp(3, 0, "b"))) is True
    assert reg.merge(LWWRegister(7, Timestamp(1, 0, "c"))) is False
    assert reg.value == 6


def test_mv_register_concurrency_and_no_resurrection() -> None:
    a: MVRegister[str] = MVRegister()
    b: MVRegister[str] = MVRegister()
    a.set("a", "x")
    b.set("b", "y")
    old_b: MVRegister[str] = MVRegister()
    old_b.merge(b)
    assert a.merge(b) is True
    assert sorted(a.values()) == ["x", "y"]
    a.set("a", "z")  # saw both, replaces both
    assert a.values() == ["z"]
    assert a.merge(old_b) is False
    assert a.values() == ["z"]
    b.merge(a)
    assert b.values() == ["z"]
    assert b.merge(a) is False


def test_pn_counter_merge_is_pointwise_max() -> None:
    c1, c2 = PNCounter(), PNCounter()
    c1.increment("a", 5)
    c2.increment("b", -3)
    c2.increment("b", 1)
    assert c1.merge(c2) is True
    assert c1.value == 3
    assert c1.merge(c2) is False
    assert c1.state() == ([("a", 5), ("b", 1)], [("b", 3)])


class MVMachine(ReplicaMachine[MVRegister[int]]):
    def new_replica(self, index: int) -> MVRegister[int]:
        return MVRegister()

    def local_update(self, replica: MVRegister[int], index: int, data: st.DataObject) -> None:
        replica.set(f"n{index}", data.draw(st.integers(0, 4)))

    def merge_into(self, target: MVRegister[int], source: MVRegister[int]) -> None:
        target.merge(source)

    def observe(self, replica: MVRegister[int]) -> Any:
        return replica.state()

    def dominates(self, after: MVRegister[int], before_value: Any) -> bool:
        # each version vector seen before is still present or dominated by a surviving one
        now = [dict(vv) for _, vv in after.state()]
        return all(any(all(n.get(k, 0) >= c for k, c in vv) for n in now) for _, vv in before_value)


class PNMachine(ReplicaMachine[PNCounter]):
    def __init__(self) -> None:
        super().__init__()
        self.total = 0

    def new_replica(self, index: int) -> PNCounter:
        return PNCounter()

    def local_update(self, replica: PNCounter, index: int, data: st.DataObject) -> None:
        amount = data.draw(st.integers(-5, 5))
        replica.increment(f"n{index}", amount)
        self.total += amount

    def merge_into(self, target: PNCounter, source: PNCounter) -> None:
        target.merge(source)

    def observe(self, replica: PNCounter) -> Any:
        return replica.state()

    def teardown(self) -> None:
        super().teardown()
        assert all(r.value == self.total for r in self.replicas)


small = settings(max_examples=30, stateful_step_count=30)
TestMVMachine = MVMachine.TestCase
TestMVMachine.settings = small
TestPNMachine = PNMachine.TestCase
TestPNMachine.settings = small
