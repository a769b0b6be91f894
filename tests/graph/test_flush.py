"""The flush: signals during it, effects after it, effect writes and errors."""

from __future__ import annotations

import pytest

from octosync import Context
from octosync.errors import ComputeError, GraphError


def test_signal_is_recomputed_during_the_flush() -> None:
    ctx = Context()
    a = ctx.cell(1)
    calls: list[int] = []

    def plus_one() -> int:
        calls.append(a.get())
        return a.get() + 1

    s = ctx.signal(plus_one)
    assert calls == [1]
    with ctx.batch():
        a.set(2)
        a.set(3)
        assert calls == [1]
    assert calls == [1, 3]
    assert s.get() == 4
    assert calls == [1, 3]


def test_effect_runs_once_per_outermost_batch() -> None:
    ctx = Context()
    a = ctx.cell(0)
    b = ctx.cell(0)
    seen: list[tuple[int, int]] = []
    ctx.effect(lambda: seen.append((a.get(), b.get())))
    with ctx.batch():
        a.set(1)
        with ctx.batch():
            b.set(1)
            a.set(2)
        assert seen == [(0, 0)]
    assert seen == [(0, 0), (2, 1)]
    b.set(1)  # equal: no flush, no run
    assert seen == [(0, 0), (2, 1)]


def test_effect_writes_form_the_next_flush() -> None:
    ctx = Context()
    a = ctx.cell(0)
    mirror = ctx.cell(0)
    ctx.effect(lambda: mirror.set(a.get() * 10))
    epoch = ctx.epoch
    a.set(4)
    assert mirror.get() == 40
    assert ctx.epoch == epoch + 2


def test_runaway_effect_is_stopped() -> None:
    ctx = Context()
    a = ctx.cell(0)
    ctx.effect(lambda: a.set(a.get() + 1))
    with pytest.raises(GraphError, match="kept writing"):
        a.set(-1)


def test_failing_signal_holds_error_and_recovers() -> None:
    ctx = Context()
    a = ctx.cell(1)
    s = ctx.signal(lambda: 10 // a.get())
    a.set(0)  # the flush does not raise: the error waits for readers
    with pytest.raises(ComputeError):
        s.get()
    a.set(5)
    assert s.get() == 2


def test_effect_error_is_raised_after_the_flush_and_effect_stays_subscribed() -> None:
    ctx = Context()
    a = ctx.cell(1)
    seen: list[int] = []

    def fragile() -> None:
        seen.append(10 // a.get())

    ctx.effect(fragile)
    with pytest.raises(ComputeError) as info:
        a.set(0)
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    assert a.get() == 0
    a.set(2)
    assert seen == [10, 5]
