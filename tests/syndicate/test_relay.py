"""The relay without sockets: membranes, handles, the gatekeeper, caveats, presence, errors."""

from __future__ import annotations

import preserves
import pytest
from preserves import Embedded

from octosync.errors import HandleInUse, InvalidPattern, OctosyncError, UnknownHandle, UnknownOid
from octosync.syndicate.relay import GATEKEEPER_OID
from octosync.syndicate.sturdy import attenuate, mint
from octosync.wire.syndicate import Assert, Mine, Retract, TurnEvent, Yours
from tests.syndicate.helpers import (
    RESOLVER_OID,
    SECRET,
    Net,
    bind,
    discard,
    group_rec,
    lit,
    observe,
    rec,
    sym,
)

PRESENT = group_rec(sym("Present"), bind())


def test_two_peers_see_each_others_presence_and_its_retraction_on_close() -> None:
    net = Net()
    alice, bob = net.peer(), net.peer()
    ds_a, ds_b = alice.dataspace_oid(), bob.dataspace_oid()
    alice.publish(ds_a, observe(PRESENT, 5))
    bob.publish(ds_b, observe(PRESENT, 5))
    alice.publish(ds_a, rec("Present", "alice"))
    bob.publish(ds_b, rec("Present", "bob"))
    assert alice.seen(5) == bob.seen(5) == [("alice",), ("bob",)]
    bob.close()
    assert alice.seen(5) == [("alice",)]
    assert len(net.relay.dataspace("demo").space) == 2  # alice's Observe and Present


def test_observer_captures_literals_and_messages_once() -> None:
    net = Net()
    obs, pub = net.peer(), net.peer()
    ds = obs.dataspace_oid()
    pattern = group_rec(sym("Point"), bind(), lit(1), bind())
    obs.publish(ds, observe(pattern, 7))
    d = pub.dataspace_oid()
    pub.publish(d, rec("Point", 1, 1, "a"))
    pub.publish(d, rec("Point", 2, 2, "b"))
    h = pub.publish(d, rec("Point", 3, 1, "c"))
    pub.publish(d, rec("Point", 3, 1, "c"))  # a second copy: the observer hears once
    pub.publish(d, rec("Point", 3, 1))  # another arity: no match
    pub.message(d, rec("Point", 9, 1, "m"))
    pub.message(d, rec("Point", 9, 2, "m"))
    assert obs.seen(7) == [(1, "a"), (3, "c")]
    assert obs.messages[7] == [(9, "m")]
    pub.retract(d, h)
    assert obs.seen(7) == [(1, "a"), (3, "c")]  # one copy is left
    pub.close()
    assert obs.seen(7) == []


def test_retracting_an_observe_retracts_its_matches_from_the_observer() -> None:
    net = Net()
    p = net.peer()
    ds = p.dataspace_oid()
    p.publish(ds, rec("Present", "x"))
    h = p.publish(ds, observe(PRESENT, 5))
    assert p.seen(5) == [("x",)]
    p.retract(ds, h)
    assert p.seen(5) == []


def test_observers_of_observe_see_the_wire_record_with_its_ref() -> None:
    net = Net()
    watcher, other = net.peer(), net.peer()
    meta = group_rec(sym("Observe"), bind(), bind())
    watcher.publish(watcher.dataspace_oid(), observe(meta, 3))
    other.publish(other.dataspace_oid(), observe(PRESENT, 44))
    seen = watcher.seen(3)
    assert len(seen) == 2  # its own Observe matches too
    [(_, ref)] = [s for s in seen if s[0] == PRESENT]
    # other's observer, exported to watcher under a fresh server OID (``mine`` from the server)
    assert isinstance(ref, Embedded)
    assert isinstance(ref.embeddedValue, Mine)
    exported = net.relay.conns[watcher.id].exported
    assert ref.embeddedValue.oid in exported.by_oid


def test_membrane_counts_pins_and_forgets_at_zero() -> None:
    net = Net()
    p = net.peer()
    conn = net.relay.conns[p.id]
    ds = p.dataspace_oid()
    assert sorted(conn.exported.by_oid) == [GATEKEEPER_OID, ds]
    h1 = p.publish(ds, rec("Holds", Embedded(Mine(11))))
    h2 = p.publish(ds, rec("Holds", Embedded(Mine(11)), 2))
    assert conn.imported.by_oid[11].count == 2
    p.retract(ds, h1)
    assert conn.imported.by_oid[11].count == 1
    p.retract(ds, h2)
    assert 11 not in conn.imported.by_oid
    assert list(conn.inbound) == [1]  # the resolve


def test_a_ref_seen_by_another_peer_is_exported_and_released_with_its_assertion() -> None:
    net = Net()
    a, b = net.peer(), net.peer()
    b.publish(b.dataspace_oid(), observe(group_rec(sym("Holds"), bind()), 6))
    h = a.publish(a.dataspace_oid(), rec("Holds", Embedded(Mine(11))))
    [(ref,)] = b.seen(6)
    oid = ref.embeddedValue.oid
    b_conn = net.relay.conns[b.id]
    assert b_conn.exported.by_oid[oid].count == 1
    # b can use the ref: a message to it reaches a's object 11
    b.message(oid, "hello")
    assert a.messages[11] == ["hello"]
    a.retract(a.dataspace_oid(), h)
    assert b.seen(6) == []
    assert oid not in b_conn.exported.by_oid


def test_a_ref_back_to_its_owner_is_yours() -> None:
    net = Net()
    p = net.peer()
    ds = p.dataspace_oid()
    p.publish(ds, observe(group_rec(sym("Holds"), bind()), 6))
    p.publish(ds, rec("Holds", Embedded(Mine(11))))
    [(ref,)] = p.seen(6)
    assert ref.embeddedValue == Yours(11)


def test_sync_round_trips_through_the_dataspace_and_the_gatekeeper() -> None:
    net = Net()
    p = net.peer()
    p.sync(p.dataspace_oid(), Mine(21))
    p.sync(GATEKEEPER_OID, Mine(22))
    assert p.messages[21] == [True]
    assert p.messages[22] == [True]
    assert 21 not in net.relay.conns[p.id].imported.by_oid


def bad_turn_cases() -> list[tuple[str, list[TurnEvent], type[OctosyncError]]]:
    return [
        ("unknown target", [TurnEvent(77, Assert(1, 50))], UnknownOid),
        ("unknown yours", [TurnEvent(1, Assert(rec("R", Embedded(Yours(99))), 50))], UnknownOid),
        ("handle in use", [TurnEvent(1, Assert(1, 50)), TurnEvent(1, Assert(2, 50))], HandleInUse),
        ("retract unknown", [TurnEvent(1, Retract(123))], UnknownHandle),
        (
            "retract twice",
            [TurnEvent(1, Assert(1, 50)), TurnEvent(1, Retract(50)), TurnEvent(1, Retract(50))],
            UnknownHandle,
        ),
        ("bad pattern", [TurnEvent(1, Assert(observe(rec("nope"), 5), 50))], InvalidPattern),
    ]


@pytest.mark.parametrize(("what", "events", "error"), bad_turn_cases())
def test_a_bad_turn_is_refused_whole_and_nobody_sees_anything(
    what: str, events: list[TurnEvent], error: type[OctosyncError]
) -> None:
    net = Net()
    watcher, bad = net.peer(), net.peer()
    ds = watcher.dataspace_oid()
    assert bad.dataspace_oid() == 1
    watcher.publish(ds, observe(bind(), 5))
    before = watcher.seen(5)
    size = len(net.relay.dataspace("demo").space)
    good_first = TurnEvent(1, Assert(rec("Present", "sneaky"), 49))
    with pytest.raises(error):
        bad.send(good_first, *events)
    assert watcher.seen(5) == before
    assert len(net.relay.dataspace("demo").space) == size
    assert list(net.relay.conns[bad.id].inbound) == [1]  # the resolve only


def test_a_handle_may_be_reused_after_its_retraction_in_the_same_turn() -> None:
    net = Net()
    p = net.peer()
    ds = p.dataspace_oid()
    p.publish(ds, observe(bind(), 5))
    p.send(
        TurnEvent(ds, Assert("x", 60)), TurnEvent(ds, Retract(60)), TurnEvent(ds, Assert("y", 60))
    )
    assert "y" in [v[0] for v in p.seen(5)]
    assert "x" not in [v[0] for v in p.seen(5)]


def test_nothing_but_the_gatekeeper_is_reachable_before_a_ref_resolves() -> None:
    net = Net()
    p = net.peer(resolve=False)
    with pytest.raises(UnknownOid):
        p.publish(1, "anything")
    assert not net.relay.is_resolved(p.id)
    p.resolve()
    assert net.relay.is_resolved(p.id)


@pytest.mark.parametrize(
    "step",
    [
        mint(b"another-secret-0123456789abcdef!", "demo"),
        preserves.Record(
            sym("ref"), [preserves.ImmutableDict({sym("oid"): "other", sym("sig"): b"x" * 16})]
        ),
        rec("noise", {}),
        rec("ref", "not a dict"),
    ],
)
def test_bad_steps_are_rejected_and_resolve_nothing(step: object) -> None:
    net = Net()
    p = net.peer(resolve=False)
    answer = p.resolve(step)
    assert answer.key == sym("rejected")
    assert not net.relay.is_resolved(p.id)
    assert len(net.relay.conns[p.id].exported) == 1  # the gatekeeper only


def test_a_tampered_caveat_list_fails_the_signature() -> None:
    net = Net()
    p = net.peer(resolve=False)
    ref = attenuate(mint(SECRET, "demo"), [rec("reject", discard())])
    params = dict(ref.fields[0])
    params[sym("caveats")] = ()  # strip the caveat, keep the signature
    answer = p.resolve(preserves.Record(sym("ref"), [preserves.ImmutableDict(params)]))
    assert answer == rec("rejected", "bad signature")


def test_credentials_must_grant_the_dataspace() -> None:
    net = Net()
    p = net.peer(lambda name: name == "other", resolve=False)
    assert p.resolve().key == sym("rejected")
    assert p.resolve(mint(SECRET, "other")).key == sym("accepted")


def test_retracting_the_resolve_retracts_the_answer() -> None:
    net = Net()
    p = net.peer()
    (h,) = [h for h in net.relay.conns[p.id].inbound]
    p.retract(GATEKEEPER_OID, h)
    assert p.seen(RESOLVER_OID) == []
    assert list(net.relay.conns[p.id].exported.by_oid) == [GATEKEEPER_OID]


def test_caveats_of_a_sturdy_ref_rewrite_and_reject() -> None:
    net = Net()
    watcher = net.peer()
    watcher.publish(watcher.dataspace_oid(), observe(bind(), 5))
    rewrite = rec(
        "or",
        [
            rec(
                "rewrite",
                rec("rec", sym("Present"), [bind(sym("String"))]),
                rec("rec", sym("Seen"), [rec("ref", 0), rec("lit", "via-caveat")]),
            ),
            rec("rewrite", rec("rec", sym("Ping"), [discard()]), rec("lit", "pinged")),
        ],
    )
    reject = rec("reject", rec("rec", sym("Secret"), [discard()]))
    limited = attenuate(mint(SECRET, "demo"), [rewrite, reject])
    p = net.peer(resolve=False)
    assert p.resolve(limited).key == sym("accepted")
    ds = p.dataspace_oid()
    p.publish(ds, rec("Present", "x"))
    p.publish(ds, rec("Present", 1))  # no alternative matches: dropped
    p.publish(ds, rec("Secret", "s"))  # rejected (the newest caveat runs first)
    p.publish(ds, rec("Ping", 1))
    seen = [v[0] for v in watcher.seen(5)]
    assert rec("Seen", "x", "via-caveat") in seen
    assert "pinged" in seen
    assert not any(getattr(v, "key", None) in (sym("Present"), sym("Secret")) for v in seen)


def test_refs_sent_only_in_messages_do_not_grow_the_oid_table() -> None:
    net = Net()
    a, b = net.peer(), net.peer()
    b.publish(b.dataspace_oid(), observe(group_rec(sym("Call"), bind()), 6))
    table = net.relay.conns[b.id].exported
    size = len(table)
    for oid in range(20, 30):
        a.message(a.dataspace_oid(), rec("Call", Embedded(Mine(oid))))
    assert len(b.messages[6]) == 10
    assert len(table) == size


def test_activity_notes_what_each_dataspace_took_and_who_caused_it() -> None:
    net = Net(record=True)
    alice, bob = net.peer(), net.peer()
    assert net.relay.take_activity() == []  # resolving at the gatekeeper is not activity
    ds_a, ds_b = alice.dataspace_oid(), bob.dataspace_oid()
    h = alice.publish(ds_a, rec("Point", 1, 2))
    alice.publish(ds_a, "bare")
    bob.message(ds_b, rec("Ping", 3))
    alice.retract(ds_a, h)
    notes = net.relay.take_activity()
    assert [(n.dataspace, n.action, n.label, n.conn) for n in notes] == [
        ("demo", "assert", "Point", alice.id),
        ("demo", "assert", "", alice.id),
        ("demo", "message", "Ping", bob.id),
        ("demo", "retract", "Point", alice.id),
    ]
    assert notes[0].handle == notes[3].handle != notes[1].handle
    assert notes[2].handle == 0
    assert notes[3].value is None
    alice.close()  # the close retracts what is left, naming the connection that closed
    assert [(n.action, n.label, n.handle, n.conn) for n in net.relay.take_activity()] == [
        ("retract", "", notes[1].handle, alice.id)
    ]
    assert net.relay.take_activity() == []


def test_without_recording_nothing_is_kept() -> None:
    net = Net()
    alice = net.peer()
    alice.publish(alice.dataspace_oid(), rec("Point", 1, 2))
    assert net.relay.activity is None
    assert net.relay.take_activity() == []
