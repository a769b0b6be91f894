from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from octosync.errors import Overloaded
from octosync.server.guard import ConnectionGuard, default_max_connections, overloaded_response


def test_caps_per_address_and_in_total() -> None:
    guard = ConnectionGuard(max_total=3, max_per_address=2)
    assert guard.admit("a") is None
    assert guard.admit("a") is None
    refused = guard.admit("a")
    assert isinstance(refused, Overloaded)
    assert "a already holds 2" in refused.message
    assert guard.admit("b") is None
    assert isinstance(guard.admit("c"), Overloaded)
    guard.release("a")
    assert guard.admit("c") is None
    assert guard.refused == 2


@given(st.lists(st.tuples(st.booleans(), st.sampled_from("abc")), max_size=60))
def test_counts_never_exceed_the_caps(ops: list[tuple[bool, str]]) -> None:
    guard = ConnectionGuard(max_total=4, max_per_address=2)
    held: list[str] = []
    for admit, address in ops:
        if admit:
            if guard.admit(address) is None:
                held.append(address)
        elif address in held:
            held.remove(address)
            guard.release(address)
        assert guard.total == len(held) <= 4
        assert all(guard.held_by(a) == held.count(a) <= 2 for a in "abc")


def test_default_total_stays_below_the_descriptor_limit() -> None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert default_max_connections(None) < soft
    assert default_max_connections(5) == 5


def test_the_refusal_is_a_complete_http_response() -> None:
    raw = overloaded_response(Overloaded("full"))
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 ")
    assert f"Content-Length: {len(body)}".encode() in head
    assert body == b'{"code": "Overloaded", "message": "full"}'
