"""Configuration transitions: every change bumps the epoch; neighbours follow the order."""

from __future__ import annotations

from octosync.chain.config import ChainConfig, Member

A, B, C = (Member(n, "127.0.0.1", p) for n, p in (("a", 1), ("b", 2), ("c", 3)))


def test_neighbours_head_and_tail() -> None:
    config = ChainConfig((A, B, C), 4)
    assert config.head == A
    assert config.tail == C
    assert config.predecessor("a") is None
    assert config.predecessor("b") == A
    assert config.successor("b") == C
    assert config.successor("c") is None


def test_without_and_with_tail_bump_the_epoch() -> None:
    config = ChainConfig((A, B, C), 4)
    assert config.without("b") == ChainConfig((A, C), 5)
    rejoined = config.with_tail(Member("a", "127.0.0.1", 9))
    assert rejoined.ids() == ["b", "c", "a"]
    assert rejoined.epoch == 5
    assert ChainConfig().with_tail(A) == ChainConfig((A,), 1)
