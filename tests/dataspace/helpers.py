"""Shared test helpers: an event recorder and hypothesis strategies for values and patterns."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from octosync.dataspace import Record, _, capture
from octosync.dataspace.oracle import canonical_text
from octosync.dataspace.skeleton import Callback

Event = tuple[str, str, tuple[Any, ...]]


class Recorder:
    """Collects ``(observer, event, captures)`` in the order the callbacks fire."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def callbacks(self, name: str) -> dict[str, Callback]:
        def on(kind: str) -> Callback:
            return lambda caps: self.events.append((name, kind, caps))

        return {"on_add": on("+"), "on_remove": on("-"), "on_message": on("!")}

    def take(self) -> list[Event]:
        out, self.events = self.events, []
        return out


def typed(events: list[Event]) -> list[tuple[str, str, tuple[str, ...]]]:
    """Events with captures replaced by their canonical texts (1 != 1.0 != True)."""
    return [(name, kind, tuple(canonical_text(c) for c in caps)) for name, kind, caps in events]


ATOMS = st.sampled_from([0, 1, 1.0, True, False, "a", "b", None, b"a", float("nan")])
LABELS = st.sampled_from(["p", "q", 1])
DICT_KEYS = st.sampled_from(["k", "j", 1, True, 2.0])


def _compounds(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.builds(
            lambda label, fields: Record(label, *fields), LABELS, st.lists(children, max_size=2)
        ),
        st.lists(children, max_size=2),
        st.dictionaries(DICT_KEYS, children, max_size=2),
    )


VALUES = st.recursive(ATOMS, _compounds, max_leaves=5)

PATTERNS = st.recursive(
    st.one_of(st.just(_), st.builds(capture), ATOMS),
    lambda children: st.one_of(_compounds(children), st.builds(capture, children)),
    max_leaves=5,
)


@st.composite
def abstraction(draw: st.DrawFn, value: Any) -> Any:
    """A pattern made from ``value`` by replacing some positions with ``_`` or ``capture``."""
    choice = draw(st.sampled_from(["keep", "keep", "discard", "capture", "capture-sub"]))
    if choice == "discard":
        return _
    if choice == "capture":
        return capture()
    if choice == "capture-sub":
        return capture(draw(abstraction(value)))
    t = type(value)
    if t is Record:
        return Record(value.label, *[draw(abstraction(f)) for f in value.fields])
    if t is list:
        return [draw(abstraction(x)) for x in value]
    if t is dict:
        return {k: draw(abstraction(x)) for k, x in value.items()}
    return value


_SMALL = st.sampled_from([0, 1, True, 1.0, "a"])
_INNER = st.one_of(
    st.builds(lambda label, a, b: Record(label, a, b), LABELS, _SMALL, _SMALL),
    st.lists(_SMALL, min_size=1, max_size=2),
    st.dictionaries(DICT_KEYS, _SMALL, min_size=1, max_size=2),
)
NESTED = st.builds(
    lambda label, fields: Record(label, *fields),
    LABELS,
    st.lists(
        st.one_of(_INNER, st.lists(_INNER, min_size=1, max_size=2), _SMALL), min_size=2, max_size=3
    ),
)
"""Records whose fields are themselves compounds, side by side: the trie's pop moves."""

SOME_VALUES = st.one_of(VALUES, NESTED)
