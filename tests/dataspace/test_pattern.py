"""Skeletons: shape, constant map and capture map, as the seed defines them."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.dataspace import Index, Record, _, analyse, capture, key, match
from octosync.dataspace.pattern import ENTRY, FIELD, ITEM, Shape
from octosync.dataspace.skeleton import Observer
from octosync.errors import InvalidPattern
from tests.dataspace.helpers import SOME_VALUES, Recorder, abstraction, typed


def test_seed_example_speak_alice_capture() -> None:
    sk = analyse(Record("speak", "Alice", capture()))
    assert sk.shape == Shape(("speak", 2), (((FIELD, 0), None), ((FIELD, 1), None)))
    assert sk.const_paths == (((FIELD, 0),),)
    assert sk.const_key == ("Alice",)
    assert sk.capture_paths == (((FIELD, 1),),)


def test_constant_sub_patterns_are_constants_not_shape() -> None:
    sk = analyse(Record("p", Record("q", 1, 2), _))
    assert sk.const_paths == (((FIELD, 0),),)
    assert sk.shape is not None
    assert sk.shape.children[0] == ((FIELD, 0), None)
    whole = analyse(Record("p", 1))
    assert whole.shape is None
    assert whole.const_paths == ((),)
    assert analyse(_).shape is None
    assert analyse(_).const_paths == ()
    assert analyse(capture()).capture_paths == ((),)


def test_capture_of_a_sub_pattern_captures_first_then_looks_inside() -> None:
    sk = analyse([capture(Record("r", capture(), 7)), {"k": capture()}])
    assert sk.capture_paths == (
        ((ITEM, 0),),
        ((ITEM, 0), (FIELD, 0)),
        ((ITEM, 1), (ENTRY, "k")),
    )
    assert sk.const_paths == (((ITEM, 0), (FIELD, 1)),)
    assert sk.const_key == (7,)


def test_operators_in_dict_keys_are_rejected() -> None:
    with pytest.raises(InvalidPattern) as err:
        analyse(Record("p", {capture(): 1}))
    assert err.value.path == "pattern.fields[0]"
    with pytest.raises(InvalidPattern):
        analyse({float("nan"): capture()})


@given(st.data(), SOME_VALUES)
def test_an_abstraction_of_a_value_matches_it_in_the_index_too(data: st.DataObject, v: Any) -> None:
    pattern = data.draw(abstraction(v))
    caps = match(pattern, v)
    assert caps is not None
    index, rec = Index(), Recorder()
    index.add_handler(analyse(pattern), Observer(**rec.callbacks("o")))
    index.add_assertion(key(v), v)
    assert typed(rec.take()) == typed([("o", "+", caps)])
