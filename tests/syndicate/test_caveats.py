"""Attenuation: patterns, templates, and the order caveats run in."""

from __future__ import annotations

import pytest

from octosync.dataspace.values import Record, Symbol
from octosync.syndicate.caveats import attenuate, instantiate, matches
from octosync.syndicate.values import Ref


def r(label: str, *fields: object) -> Record:
    return Record(Symbol(label), *fields)


D = r("_")


@pytest.mark.parametrize(
    ("pattern", "value", "bindings"),
    [
        (D, "anything", []),
        (r("bind", Symbol("String")), "s", ["s"]),
        (Symbol("SignedInteger"), 3, []),
        (Symbol("Embedded"), Ref("entity"), []),
        (r("lit", 1), 1, []),
        (r("and", [r("bind", D), Symbol("Double")]), 1.5, [1.5]),
        (r("not", r("lit", 1)), 2, []),
        (r("rec", Symbol("P"), [r("bind", D), D]), r("P", 1, 2), [1]),
        (r("arr", [D, r("bind", D)]), [1, 2], [2]),
        (r("dict", {"k": r("bind", D)}), {"k": 1, "other": 2}, [1]),
    ],
)
def test_patterns_that_match(pattern: object, value: object, bindings: list[object]) -> None:
    got: list[object] = []
    assert matches(pattern, value, got)
    assert got == bindings


@pytest.mark.parametrize(
    ("pattern", "value"),
    [
        (Symbol("String"), Symbol("s")),
        (Symbol("SignedInteger"), True),
        (r("lit", 1), True),
        (r("not", D), 1),
        (r("rec", Symbol("P"), [D]), r("P", 1, 2)),
        (r("arr", [D]), [1, 2]),
        (r("dict", {"k": D}), {"j": 1}),
        (Symbol("NoSuchAtomType"), 1),
    ],
)
def test_patterns_that_do_not_match(pattern: object, value: object) -> None:
    assert not matches(pattern, value, [])


def test_templates_fill_refs_and_attenuate() -> None:
    ref = Ref("e")
    t = r(
        "rec",
        Symbol("Q"),
        [r("ref", 1), r("arr", [r("ref", 0)]), r("attenuate", r("ref", 2), [r("x")])],
    )
    out = instantiate(t, ["a", "b", ref])
    assert out == r("Q", "b", ["a"], Ref("e", (r("x"),)))
    assert instantiate(r("ref", 5), ["a"]) is None
    assert instantiate(r("attenuate", r("lit", 1), []), []) is None


def test_caveats_run_newest_first() -> None:
    to_b = r("rewrite", r("lit", "a"), r("lit", "b"))
    to_c = r("rewrite", r("lit", "b"), r("lit", "c"))
    assert attenuate([to_c, to_b], "a") == "c"  # to_b (newest) first, then to_c
    assert attenuate([to_b, to_c], "a") is None  # to_c first: "a" does not match it
    assert attenuate([r("reject", r("lit", 1))], 1) is None
    assert attenuate([r("reject", r("lit", 1))], 2) == 2
    assert attenuate([r("unknown-caveat")], 2) is None
    alts = r("or", [r("rewrite", r("lit", 1), r("lit", "one")), r("rewrite", D, r("lit", "other"))])
    assert attenuate([alts], 1) == "one"
    assert attenuate([alts], 2) == "other"
