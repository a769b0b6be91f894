"""Scripted histories with the exact events every observer must see, in order.

Each trace runs against the skeleton index and the brute-force oracle alike.
"""

from __future__ import annotations

from typing import Any

import pytest

from octosync.dataspace import BruteForceDataspace, Dataspace, Observe, Record, _, capture
from octosync.errors import InvalidPattern, InvalidValue, UnknownHandle
from tests.dataspace.helpers import Recorder, typed

Space = Dataspace | BruteForceDataspace


@pytest.fixture(params=[Dataspace, BruteForceDataspace], ids=["index", "oracle"])
def space(request: pytest.FixtureRequest) -> Space:
    made: Space = request.param()
    return made


def present(who: Any) -> Record:
    return Record("present", who)


def test_handler_added_after_assertions_is_replayed_in_order(space: Space) -> None:
    rec = Recorder()
    space.assert_(present("alice"))
    space.assert_(present("bob"))
    space.assert_(Record("speak", "alice", "hi"))
    space.observe(present(capture()), **rec.callbacks("who"))
    space.observe(present(_), **rec.callbacks("anyone"))
    assert rec.take() == [
        ("who", "+", ("alice",)),
        ("who", "+", ("bob",)),
        ("anyone", "+", ()),
    ]


def test_handler_removed_before_assertions_hears_nothing(space: Space) -> None:
    rec = Recorder()
    h = space.observe(present(capture()), **rec.callbacks("who"))
    a = space.assert_(present("alice"))
    space.retract(h)
    space.assert_(present("bob"))
    space.retract(a)
    space.send(present("carol"))
    assert rec.take() == [("who", "+", ("alice",))]


def test_bag_semantics_one_plus_and_one_minus(space: Space) -> None:
    rec = Recorder()
    space.observe(present(capture()), **rec.callbacks("who"))
    h1 = space.assert_(present("alice"))
    h2 = space.assert_(present("alice"))
    assert space.count(present("alice")) == 2
    space.retract(h1)
    assert rec.take() == [("who", "+", ("alice",))]
    space.retract(h2)
    assert rec.take() == [("who", "-", ("alice",))]
    assert space.count(present("alice")) == 0


def test_capture_vectors_are_a_bag_too(space: Space) -> None:
    rec = Recorder()
    space.observe(Record("speak", capture(), _), **rec.callbacks("speaker"))
    h1 = space.assert_(Record("speak", "alice", "hi"))
    h2 = space.assert_(Record("speak", "alice", "bye"))
    space.retract(h1)
    assert rec.take() == [("speaker", "+", ("alice",))]
    space.retract(h2)
    assert rec.take() == [("speaker", "-", ("alice",))]


def test_nested_records(space: Space) -> None:
    rec = Recorder()
    pattern = Record("move", Record("pos", capture(), 0), capture(Record("dir", _)))
    space.observe(pattern, **rec.callbacks("mv"))
    space.assert_(Record("move", Record("pos", 3, 0), Record("dir", "n")))
    space.assert_(Record("move", Record("pos", 3, 1), Record("dir", "n")))  # constant differs
    space.assert_(Record("move", Record("pos", 3, 0), "n"))  # shape differs
    space.assert_(Record("move", Record("pos", 3), Record("dir", "s")))  # arity differs
    assert rec.take() == [("mv", "+", (3, Record("dir", "n")))]


def test_sibling_compounds_pop_back_up_the_trie(space: Space) -> None:
    rec = Recorder()
    pattern = Record("pair", Record("a", capture()), [capture(), "k"], {"z": capture()})
    space.observe(pattern, **rec.callbacks("pair"))
    space.assert_(Record("pair", Record("a", 1), [2, "k"], {"z": 3}))
    space.assert_(Record("pair", Record("a", 1), [2, "j"], {"z": 3}))
    space.assert_(Record("pair", Record("b", 1), [2, "k"], {"z": 3}))
    space.assert_(Record("pair", Record("a", 1), [2, "k"], {"z": 3, "y": 4}))
    assert rec.take() == [("pair", "+", (1, 2, 3))]


def test_list_patterns_with_discards_and_constants(space: Space) -> None:
    rec = Recorder()
    space.observe(["chat", _, capture()], **rec.callbacks("chat"))
    space.assert_(["chat", "x", "hi"])
    space.assert_(["chat", "y", "hi"])  # same capture vector: no second +
    space.assert_(["chat", "x"])
    space.assert_(["talk", "x", "hi"])
    space.assert_(["chat", "x", "yo"])
    assert rec.take() == [("chat", "+", ("hi",)), ("chat", "+", ("yo",))]


def test_patch_replacing_3_by_4_shows_no_glitch(space: Space) -> None:
    rec = Recorder()
    space.observe([_], **rec.callbacks("any"))
    space.observe([capture()], **rec.callbacks("each"))
    h3 = space.assert_([3])
    assert rec.take() == [("any", "+", ()), ("each", "+", (3,))]
    (h4,) = space.patch(asserts=[[4]], retracts=[h3])
    assert rec.take() == [("each", "+", (4,)), ("each", "-", (3,))]
    space.retract(h4)
    assert rec.take() == [("any", "-", ()), ("each", "-", (4,))]


def test_patch_that_retracts_and_reasserts_the_same_value_is_silent(space: Space) -> None:
    rec = Recorder()
    space.observe([capture()], **rec.callbacks("each"))
    h = space.assert_([3])
    rec.take()
    space.patch(asserts=[[3]], retracts=[h])
    assert rec.take() == []
    assert space.count([3]) == 1


def test_one_one_point_zero_and_true_are_three_values(space: Space) -> None:
    rec = Recorder()
    space.observe(Record("n", capture()), **rec.callbacks("all"))
    space.assert_(Record("n", 1))
    space.assert_(Record("n", 1.0))
    space.assert_(Record("n", True))
    space.observe(Record("n", 1), **rec.callbacks("int-one"))
    space.observe({1: capture()}, **rec.callbacks("int-key"))
    space.assert_({True: "t"})
    space.assert_({1.0: "f"})
    space.assert_({1: "i"})
    space.send(Record("n", True))
    assert typed(rec.take()) == typed(
        [
            ("all", "+", (1,)),
            ("all", "+", (1.0,)),
            ("all", "+", (True,)),
            ("int-one", "+", ()),
            ("int-key", "+", ("i",)),
            ("all", "!", (True,)),
        ]
    )
    assert space.count(Record("n", 1)) == 1
    assert space.count(Record("n", False)) == 0


def test_observe_is_itself_an_assertion(space: Space) -> None:
    rec = Recorder()
    space.observe(Observe(Record("present", capture())), **rec.callbacks("meta"))
    h = space.observe(Record("present", _), **rec.callbacks("plain"))
    assert space.count(Observe(Record("present", _))) == 1
    space.retract(h)
    assert rec.take() == [("meta", "+", (_,)), ("meta", "-", (_,))]
    assert space.count(Observe(Record("present", _))) == 0


def test_an_observer_can_see_its_own_interest(space: Space) -> None:
    rec = Recorder()
    space.observe(capture(Observe(_)), **rec.callbacks("self"))
    assert typed(rec.take()) == typed([("self", "+", (Observe(capture(Observe(_))),))])


def test_messages_reach_matching_observers_and_change_nothing(space: Space) -> None:
    rec = Recorder()
    space.observe(Record("speak", "alice", capture()), **rec.callbacks("alice"))
    space.observe(Record("speak", capture(), _), **rec.callbacks("anyone"))
    space.send(Record("speak", "alice", "hello"))
    space.send(Record("speak", "bob", "hi"))
    space.send(Record("shout", "alice", "HEY"))
    assert rec.take() == [
        ("alice", "!", ("hello",)),
        ("anyone", "!", ("alice",)),
        ("anyone", "!", ("bob",)),
    ]
    assert space.count(Record("speak", "alice", "hello")) == 0


def test_capture_with_a_sub_pattern_and_whole_value_patterns(space: Space) -> None:
    rec = Recorder()
    space.observe(capture(Record("p", capture(), _)), **rec.callbacks("whole"))
    space.observe("hello", **rec.callbacks("const"))
    space.observe(capture(), **rec.callbacks("everything"))
    space.assert_(Record("p", 1, 2))
    space.assert_("hello")
    events = rec.take()  # the order across observers is the index's; per observer it is fixed

    def of(name: str) -> list[Any]:
        return [e for e in events if e[0] == name]

    assert of("whole") == [("whole", "+", (Record("p", 1, 2), 1))]
    assert of("const") == [("const", "+", ())]
    assert typed(of("everything")) == typed(
        [
            ("everything", "+", (Observe(capture(Record("p", capture(), _))),)),
            ("everything", "+", (Observe("hello"),)),
            ("everything", "+", (Observe(capture()),)),
            ("everything", "+", (Record("p", 1, 2),)),
            ("everything", "+", ("hello",)),
        ]
    )


def test_retracting_an_unknown_handle_is_typed_and_changes_nothing(space: Space) -> None:
    rec = Recorder()
    space.observe(present(capture()), **rec.callbacks("who"))
    h = space.assert_(present("alice"))
    rec.take()
    with pytest.raises(UnknownHandle) as err:
        space.retract(999)
    assert err.value.name == "UnknownHandle"
    assert err.value.path == "handle"
    for bad in (True, 1.0, "1", [1], None):
        with pytest.raises(UnknownHandle):
            space.retract(bad)  # type: ignore[arg-type]
    with pytest.raises(UnknownHandle):
        space.patch(retracts=[[h]])  # type: ignore[list-item]
    assert rec.take() == []
    space.retract(h)
    with pytest.raises(UnknownHandle):
        space.retract(h)
    assert rec.take() == [("who", "-", ("alice",))]


def test_a_bad_patch_changes_nothing(space: Space) -> None:
    rec = Recorder()
    space.observe(present(capture()), **rec.callbacks("who"))
    h = space.assert_(present("alice"))
    rec.take()
    with pytest.raises(UnknownHandle) as err:
        space.patch(asserts=[present("bob")], retracts=[h, 12345])
    assert err.value.path == "retracts[1]"
    with pytest.raises(UnknownHandle):
        space.patch(retracts=[h, h])
    with pytest.raises(InvalidValue) as bad:
        space.patch(asserts=[present("carol"), Record("x", [1, object()])], retracts=[h])
    assert bad.value.path == "asserts[1].fields[0][1]"
    assert rec.take() == []
    assert space.count(present("alice")) == 1
    assert space.count(present("bob")) == 0
    space.retract(h)  # still live
    assert rec.take() == [("who", "-", ("alice",))]


def test_bad_values_and_patterns_are_typed_errors(space: Space) -> None:
    with pytest.raises(InvalidValue) as err:
        space.assert_(Record("p", {"k": object()}))
    assert err.value.path == "$.fields[0]['k']"
    with pytest.raises(InvalidValue):
        space.send((1, 2))
    with pytest.raises(InvalidPattern):
        space.observe({capture(): 1})
    with pytest.raises(InvalidValue):
        Record(["not", "an", "atom"], 1)
    assert len(space._handles) == 0


def test_callbacks_that_change_the_dataspace_run_after_the_current_event() -> None:
    space = Dataspace()
    rec = Recorder()
    handles: list[int] = []

    def greet(caps: tuple[Any, ...]) -> None:
        rec.events.append(("greeter", "+", caps))
        handles.append(space.assert_(Record("greeted", caps[0])))
        space.send(Record("hello", caps[0]))

    space.observe(present(capture()), on_add=greet)
    space.observe(Record("greeted", capture()), **rec.callbacks("greeted"))
    space.observe(Record("hello", capture()), **rec.callbacks("hello"))
    space.assert_(present("alice"))
    space.retract(handles[0])
    assert rec.take() == [
        ("greeter", "+", ("alice",)),
        ("greeted", "+", ("alice",)),
        ("hello", "!", ("alice",)),
        ("greeted", "-", ("alice",)),
    ]
