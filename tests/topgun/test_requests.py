"""Requests beyond sync: each answered in its own response type, refused ones included."""

from __future__ import annotations

import msgspec
import pytest

from octosync.errors import DecodeError, FeatureDisabled, Forbidden, RemoteProtocolError
from octosync.topgun.replies import refusal_of_frame, wire_code
from octosync.wire import topgun as tg
from octosync.wire import topgun_requests as rq
from octosync.wire import topgun_services as sv
from tests.topgun.helpers import ALL, core, sent

VECTOR = bytes(12)

REQUESTS: list[tuple[tg.Message, type, str]] = [
    (rq.SqlQuery(rq.SqlQueryPayload("SELECT 1", "q1")), rq.SqlQueryResp, "q1"),
    (rq.VectorSearch(rq.VectorSearchPayload("v1", "users", VECTOR, 3)), rq.VectorSearchResp, "v1"),
    (
        rq.HybridSearch(rq.HybridSearchPayload("users", "alice", ["fullText"], 3, request_id="h1")),
        rq.HybridSearchResp,
        "h1",
    ),
    (
        rq.HybridSearchSub(
            rq.HybridSearchSubPayload("users", "alice", ["fullText"], 3, subscription_id="h2")
        ),
        rq.HybridSearchResp,
        "h2",
    ),
    (rq.JournalRead("j1", "0", 10), rq.JournalReadResponse, "j1"),
    (
        sv.EntryProcess("e1", "users", "u1", sv.EntryProcessor("inc", "x")),
        sv.EntryProcessResponse,
        "e1",
    ),
    (
        rq.EntryProcessBatch("e2", "users", ["u1", "u2"], rq.EntryProcessorSpec("inc", "x")),
        rq.EntryProcessBatchResponse,
        "e2",
    ),
    (
        sv.RegisterResolver("r1", "users", sv.ConflictResolver("lww", "x")),
        rq.RegisterResolverResponse,
        "r1",
    ),
    (rq.UnregisterResolver("r2", "users", "lww"), rq.UnregisterResolverResponse, "r2"),
    (sv.ListResolvers("r3"), sv.ListResolversResponse, "r3"),
]


def _correlation(reply: tg.Message) -> str:
    payload = getattr(reply, "payload", reply)
    for name in ("query_id", "request_id", "id", "subscription_id"):
        if hasattr(payload, name):
            return str(getattr(payload, name))
    raise AssertionError(f"no correlation id in {reply!r}")


@pytest.mark.parametrize(("request_message", "response_type", "ident"), REQUESTS)
def test_every_request_gets_its_own_response(
    request_message: tg.Message, response_type: type, ident: str
) -> None:
    c = core()
    c.connect(1, ALL)
    wire = tg.decode(tg.encode(request_message))  # as it arrives
    (reply,) = sent(c.handle(1, wire), 1)
    assert isinstance(reply, response_type)
    assert _correlation(reply) == ident


def test_a_refusal_carries_the_error_and_a_machine_readable_code() -> None:
    c = core()
    c.connect(1, ALL)
    (reply,) = sent(c.handle(1, rq.SqlQuery(rq.SqlQueryPayload("SELECT 1", "q1"))), 1)
    assert isinstance(reply, rq.SqlQueryResp)
    assert reply.payload.code == "FEATURE_DISABLED"
    assert reply.payload.error is not None
    assert "SQL" in reply.payload.error
    assert wire_code(Forbidden("x")) == "FORBIDDEN"
    assert wire_code(FeatureDisabled("x")) == "FEATURE_DISABLED"


def test_auth_again_and_apply_acks_draw_nothing() -> None:
    c = core()
    c.connect(1, ALL)
    for message in (tg.Auth(token="t"), tg.DeviceHello(), rq.ClientApplyAck(7)):
        assert c.handle(1, message).out == []


def test_a_server_message_from_a_client_is_refused_with_a_typed_error() -> None:
    c = core()
    c.connect(1, ALL)
    with pytest.raises(RemoteProtocolError):
        c.handle(1, rq.SqlQueryResp(rq.SqlQueryRespPayload("q", [], [])))


def test_a_vector_sent_as_a_map_of_bytes_is_read_as_bytes() -> None:
    raw = {"type": "VECTOR_SEARCH", "payload": {"id": "v", "mapName": "m", "k": 1}}
    raw["payload"]["queryVector"] = {str(i): b for i, b in enumerate(b"\x01\x02\x03\x04")}
    message = tg.decode(msgspec.msgpack.encode(raw))
    assert isinstance(message, rq.VectorSearch)
    assert rq.vector_bytes(message.payload.query_vector, "q") == b"\x01\x02\x03\x04"
    with pytest.raises(DecodeError, match=r"0\.\.n-1"):
        rq.vector_bytes({"1": 3}, "payload.queryVector")


def test_the_docs_list_every_message_with_its_status() -> None:
    import re
    import typing
    from pathlib import Path

    page = Path(__file__).resolve().parents[2] / "docs" / "faces" / "topgun-calls.md"
    listed = re.findall(r"^\| `([A-Z_]+)` \| (?:C|S|N|C/S) \| \S", page.read_text(), re.M)
    tags = {t.__struct_config__.tag for t in typing.get_args(tg.Message)}
    assert sorted(listed) == sorted(tags)


def test_a_request_that_fails_to_decode_is_answered_in_its_own_response() -> None:
    bad = {"type": "SEARCH", "payload": {"requestId": "r7", "mapName": "m", "query": 5}}
    data = msgspec.msgpack.encode(bad)
    with pytest.raises(DecodeError) as err:
        tg.decode(data)
    reply = refusal_of_frame(data, err.value)
    assert isinstance(reply, sv.SearchResp)
    assert reply.payload.request_id == "r7"
    assert reply.payload.error is not None
    assert reply.payload.error.startswith("DecodeError: ")
    flat = msgspec.msgpack.encode({"type": "JOURNAL_READ", "requestId": "j", "limit": "x"})
    assert isinstance(refusal_of_frame(flat, err.value), rq.JournalReadResponse)
    for junk in (b"\x01", msgspec.msgpack.encode({"type": "SEARCH"}), b"\x81\xa4type\x05"):
        assert refusal_of_frame(junk, err.value) is None
