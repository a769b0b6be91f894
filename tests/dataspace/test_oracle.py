"""The brute-force matcher and the canonical text the oracle keys its bags with."""

from __future__ import annotations

from octosync.dataspace import Record, _, capture, match
from octosync.dataspace.oracle import canonical_text


def test_match_examples() -> None:
    assert match(Record("speak", "Alice", capture()), Record("speak", "Alice", "hi")) == ("hi",)
    assert match(Record("speak", "Alice", capture()), Record("speak", "Bob", "hi")) is None
    assert match(Record("p", capture()), Record("p", 1, 2)) is None
    assert match([capture(), _], [1, 2]) == (1,)
    assert match({"a": capture()}, {"a": 1, "b": 2}) is None  # dict patterns fix the key set
    assert match({1: capture()}, {True: 1}) is None
    assert match(Record("n", 1), Record("n", True)) is None
    assert match(capture(capture()), 5) == (5, 5)


def test_canonical_text_separates_types_and_ignores_dict_order() -> None:
    texts = {canonical_text(v) for v in (1, 1.0, True, "1", b"1", [1], Record(1))}
    assert len(texts) == 7
    assert canonical_text({"a": 1, "b": 2}) == canonical_text({"b": 2, "a": 1})
    assert canonical_text(-0.0) == canonical_text(0.0)
    assert canonical_text(float("nan")) == canonical_text(float("nan"))
