"""TopGun's real client calling what its server offers beyond sync: every call answered.

Refused writes stay pending in the client; every request gets its own response (an error
inside where the feature is not served), never a timeout. Same harness as
``test_topgun_interop.py``: the server on loopback, the real client under Node.js, each process
bounded by ``--seconds``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from octosync.server.auth import AuthConfig, issue_token
from octosync.server.topgun_state import topgun_state
from tests.e2e.helpers import serve
from tests.e2e.test_topgun_interop import SECRET, start

pytestmark = pytest.mark.peer

AUTH = AuthConfig(hs256_secret=SECRET)


async def test_a_refused_write_stays_pending_in_the_client_and_is_never_acked(
    tmp_path: Path, topgun_peer: tuple[str, Path]
) -> None:
    token = issue_token(SECRET, "tagger", {}, maps={"users": ["read"], "tags": ["read", "write"]})
    async with serve(tmp_path, insecure_dev=False, auth=AUTH) as srv:
        writer = await start(
            topgun_peer,
            srv.ws_url,
            "ops",
            'put=u1={"name":"Mallory"}',
            'oradd=post-1="ok"',
            token=token,
            seconds=3,
        )
        lines = await writer.end()
        users = topgun_state(srv.runtime).core.maps.live_items("users")
        tags = topgun_state(srv.runtime).core.maps.store.or_values("tags", "post-1")
    (end,) = [line for line in lines if line.get("event") == "end"]
    assert end["pendingOps"] == 1  # the refused put, kept for the client to deal with
    assert writer.events("synced") == []
    refused = {m["payload"]["opId"] for m in writer.frames("in", "OP_REJECTED")}
    assert len(refused) == 1
    (refused_id,) = refused
    acks = writer.frames("in", "OP_ACK")
    assert acks, "the accepted op was not acknowledged"
    for ack in acks:
        assert int(ack["payload"]["lastId"]) < int(refused_id)
        listed = {r["opId"] for r in ack["payload"].get("results") or []}
        assert refused_id not in listed
    assert users == {}
    assert len(tags) == 1  # the accepted OR add


CALLS = ("sql", "search", "vector", "hybrid", "journal", "processor", "resolvers", "apply-ack")


async def test_every_call_is_answered_in_its_own_response_without_a_timeout(
    tmp_path: Path, topgun_peer: tuple[str, Path]
) -> None:
    """Each call must settle within the scenario's 8 s, below every client timeout (10 s for
    journal reads, 30 s for the rest): an unanswered request would never print its line. The
    client authenticates with a token, so it sends AUTH twice; neither that nor
    ``CLIENT_APPLY_ACK`` may draw an ``ERROR``."""
    token = issue_token(SECRET, "caller", {}, maps={"*": ["read", "write"]})
    async with serve(tmp_path, insecure_dev=False, auth=AUTH) as srv:
        caller = await start(topgun_peer, srv.ws_url, "calls", *CALLS, token=token, seconds=8)
        await caller.end()
    results = {line["name"]: line for line in caller.events("call")}
    assert list(results) == list(CALLS)
    assert results["sql"]["ok"] is False
    assert results["sql"]["code"] == "FEATURE_DISABLED"
    for name in ("search", "vector", "hybrid"):  # no map has a full-text index here
        assert results[name]["ok"] is False
        assert "FeatureDisabled" in results[name]["error"]
    (journal,) = caller.frames("in", "JOURNAL_READ_RESPONSE")
    assert "FeatureDisabled" in journal["error"]
    assert len([m for m in caller.frames("out", "AUTH")]) == 2
    assert len(caller.frames("in", "AUTH_ACK")) == 1
    assert caller.frames("out", "CLIENT_APPLY_ACK")
    assert caller.frames("in", "ERROR") == []


PEOPLE = {
    "u1": {"name": "Ann", "age": 31, "team": "red"},
    "u2": {"name": "Bo", "age": 22, "team": "blue"},
    "u3": {"name": "Cy", "age": 45, "team": "red"},
    "u4": {"name": "Di", "age": 27, "team": "blue"},
    "u5": {"name": "Ed", "age": 38, "team": "red"},
}


async def _people(srv: object, topgun_peer: tuple[str, Path]) -> None:
    url = srv.ws_url  # type: ignore[attr-defined]
    ops = [f"put={k}={json.dumps(v)}" for k, v in PEOPLE.items()]
    writer = await start(topgun_peer, url, "ops", *ops)
    await writer.until("synced")
    await writer.end()


async def test_pages_by_cursor_and_load_more(tmp_path: Path, topgun_peer: tuple[str, Path]) -> None:
    by_age = sorted(PEOPLE, key=lambda k: PEOPLE[k]["age"])  # type: ignore[index]
    async with serve(tmp_path) as srv:
        await _people(srv, topgun_peer)
        pager = await start(topgun_peer, srv.ws_url, "paged", "2", seconds=8)
        await pager.end()
    (page,) = pager.events("page")
    assert page["keys"] == by_age[:2]
    assert page["hasMore"] is True
    assert page["cursor"]
    (whole,) = pager.events("all")
    assert whole["keys"] == by_age
    cursors = [m["payload"]["query"].get("cursor") for m in pager.frames("out", "QUERY_SUB")]
    assert len([c for c in cursors if c]) == 2  # loadMore asked for pages 2 and 3 by cursor
    resps = pager.frames("in", "QUERY_RESP")
    assert [r["payload"]["hasMore"] for r in resps][-1] is False


async def test_projection_and_groups_with_aggregations(
    tmp_path: Path, topgun_peer: tuple[str, Path]
) -> None:
    grouping = {
        "groupBy": ["team"],
        "aggregations": [{"func": "count"}, {"func": "sum", "field": "age"}],
    }
    async with serve(tmp_path) as srv:
        await _people(srv, topgun_peer)
        projected, grouped = await asyncio.gather(
            *(
                start(topgun_peer, srv.ws_url, "once", json.dumps(q), seconds=6)
                for q in ({"fields": ["name"]}, grouping)
            )
        )
        for c in (projected, grouped):
            await c.end()
    (rows,) = projected.events("once")
    assert {r["_key"]: r for r in rows["rows"]} == {
        k: {"name": v["name"], "_key": k} for k, v in PEOPLE.items()
    }
    (groups,) = grouped.events("once")
    by_team = {r["team"]: r for r in groups["rows"]}
    assert by_team["red"]["__count"] == 3
    assert by_team["red"]["__sum_age"] == 31 + 45 + 38
    assert by_team["blue"]["__count"] == 2
    assert by_team["blue"]["__sum_age"] == 22 + 27


ARTICLES = {
    "a1": {"title": "Python tips", "body": "python python and more python"},
    "a2": {"title": "Rust notes", "body": "a little python too"},
    "a3": {"title": "Gardening", "body": "tomatoes"},
}


async def test_full_text_search_live_updates_and_a_restart(
    tmp_path: Path, topgun_peer: tuple[str, Path]
) -> None:
    ops = [f"put={k}={json.dumps(v)}" for k, v in ARTICLES.items()]
    async with serve(tmp_path, journal=True, topgun_search=("users",)) as srv:
        writer = await start(topgun_peer, srv.ws_url, "ops", *ops)
        await writer.until("synced")
        await writer.end()
        finder = await start(topgun_peer, srv.ws_url, "search", "python", seconds=12)
        await finder.until("ready")
        await finder.until("live", lambda line: line["keys"] == ["a1", "a2"])
        newer = {"title": "Python", "body": "python python python python"}
        edit = await start(
            topgun_peer, srv.ws_url, "ops", f"put=a3={json.dumps(newer)}", "remove=a2"
        )
        await edit.until("synced")
        await edit.end()
        await finder.until("live", lambda line: line["keys"] == ["a3", "a1"])
        await finder.stop()
    (first,) = finder.events("search")
    assert [h["key"] for h in first["hits"]] == ["a1", "a2"]
    assert first["hits"][0]["score"] > first["hits"][1]["score"] > 0
    assert first["hits"][0]["matchedTerms"] == ["python"]
    kinds = {m["payload"]["changeType"] for m in finder.frames("in", "SEARCH_UPDATE")}
    assert {"ENTER", "LEAVE"} <= kinds
    async with serve(tmp_path, journal=True, topgun_search=("users",)) as srv:
        again = await start(topgun_peer, srv.ws_url, "search", "python", seconds=6)
        await again.until("search")
        await again.stop()
    (after,) = again.events("search")
    assert [h["key"] for h in after["hits"]] == ["a3", "a1"]  # the index, rebuilt


def _axis(i: int) -> list[float]:
    return [1.0 if j == i else 0.0 for j in range(64)]


async def test_vector_and_hybrid_search_and_live_hybrid(
    tmp_path: Path, topgun_peer: tuple[str, Path]
) -> None:
    docs = {
        "v1": {"t": "python notes", "vector": _axis(0)},
        "v2": {"t": "rust notes", "vector": _axis(1)},
        "v3": {"t": "python python", "vector": [0.8, 0.6] + [0.0] * 62},
    }
    ops = [f"put={k}={json.dumps(v)}" for k, v in docs.items()]
    maps = {"topgun_search": ("users",), "topgun_vectors": ("users",)}
    async with serve(tmp_path, **maps) as srv:
        writer = await start(topgun_peer, srv.ws_url, "ops", *ops)
        await writer.until("synced")
        await writer.end()
        seeker = await start(
            topgun_peer, srv.ws_url, "vector", json.dumps(_axis(0)), "python", seconds=12
        )
        await seeker.until("live", lambda line: line["keys"] == ["v3", "v1"])
        more = {"t": "python python python", "vector": _axis(2)}
        edit = await start(topgun_peer, srv.ws_url, "ops", f"put=v4={json.dumps(more)}")
        await edit.until("synced")
        await edit.end()
        await seeker.until("live", lambda line: line["keys"][:1] == ["v4"])
        await seeker.stop()
    (near,) = seeker.events("vector")
    assert [h["key"] for h in near["hits"]] == ["v1", "v3"]
    assert near["hits"][0]["score"] == pytest.approx(1.0, abs=1e-4)
    assert near["hits"][1]["score"] == pytest.approx(0.8, abs=1e-4)
    (fused,) = seeker.events("hybrid")
    assert {h["key"] for h in fused["hits"]} >= {"v1", "v3"}
    assert set(fused["hits"][0]["methodScores"]) >= {"fullText", "exact"}
    assert seeker.frames("in", "HYBRID_SEARCH_UPDATE")


async def test_a_request_with_a_bad_field_is_answered_in_its_own_response(
    tmp_path: Path,
) -> None:
    """Over a raw socket: the strict decode refuses the frame, and the refusal still reaches
    the caller by its id; the connection stays open and serves the next request."""
    import aiohttp
    import msgspec

    from octosync.wire import topgun as tg

    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        ws = await http.ws_connect(f"{srv.ws_url}/topgun")
        await ws.send_bytes(tg.encode(tg.DeviceHello()))
        await ws.receive()  # DEVICE_ACK
        bad = {"type": "SQL_QUERY", "payload": {"queryId": "q9", "sql": ["not", "text"]}}
        await ws.send_bytes(msgspec.msgpack.encode(bad))
        reply = msgspec.msgpack.decode((await ws.receive()).data)
        await ws.send_bytes(tg.encode(tg.Ping(timestamp=1)))
        pong = msgspec.msgpack.decode((await ws.receive()).data)
        await ws.close()
    assert reply["type"] == "SQL_QUERY_RESP"
    assert reply["payload"]["queryId"] == "q9"
    assert reply["payload"]["code"] == "DECODE_ERROR"
    assert pong["type"] == "PONG"


async def test_a_token_with_roles_gets_what_its_roles_grant(
    tmp_path: Path, topgun_peer: tuple[str, Path]
) -> None:
    roles = {
        "editor": {"maps": {"*": frozenset({"read", "write"})}},
        "viewer": {"maps": {"*": frozenset({"read"})}},
    }
    auth = AuthConfig(hs256_secret=SECRET, roles=roles)
    editor = issue_token(SECRET, "ed", {}, roles=["editor"])
    viewer = issue_token(SECRET, "vi", {}, roles=["viewer"])
    async with serve(tmp_path, insecure_dev=False, auth=auth) as srv:
        ed, vi = await asyncio.gather(
            *(
                start(topgun_peer, srv.ws_url, "ops", f'put={k}={{"by":"{k}"}}', token=t, seconds=3)
                for k, t in (("ed", editor), ("vi", viewer))
            )
        )
        await ed.until("synced")
        lines = await vi.end()
        await ed.end()
        stored = topgun_state(srv.runtime).core.maps.live_items("users")
    assert list(stored) == ["ed"]
    assert vi.frames("in", "OP_REJECTED")
    (end,) = [line for line in lines if line.get("event") == "end"]
    assert end["pendingOps"] == 1  # the refused put stays pending


async def test_sql_over_the_maps(tmp_path: Path, topgun_peer: tuple[str, Path]) -> None:
    async with serve(tmp_path, topgun_sql=True) as srv:
        await _people(srv, topgun_peer)
        caller = await start(topgun_peer, srv.ws_url, "calls", "sql", seconds=8)
        await caller.end()
    (result,) = caller.events("call")
    assert result["ok"] is True, result
    assert result["value"]["columns"] == ["name"]
    assert sorted(row[0] for row in result["value"]["rows"]) == sorted(
        v["name"] for v in PEOPLE.values()
    )


async def test_an_overdue_sql_query_is_interrupted_by_the_server(tmp_path: Path) -> None:
    """The core starts no timer: the server interrupts a query past its time, the caller
    gets its refusal by id, and the server keeps serving the connection."""
    import aiohttp
    import msgspec

    from octosync.wire import topgun as tg
    from octosync.wire import topgun_requests as rq
    from tests.conftest import require_module

    require_module("duckdb", "the sql extra")
    slow = rq.SqlQuery(rq.SqlQueryPayload("SELECT count(*) FROM range(100000000000) a", "q7"))
    async with serve(tmp_path, topgun_sql=True) as srv, aiohttp.ClientSession() as http:
        ws = await http.ws_connect(f"{srv.ws_url}/topgun")
        await ws.send_bytes(tg.encode(tg.DeviceHello()))
        await ws.receive()  # DEVICE_ACK
        await ws.send_bytes(tg.encode(slow))
        reply = msgspec.msgpack.decode((await ws.receive(timeout=30)).data)  # not a hang
        await ws.send_bytes(tg.encode(tg.Ping(timestamp=1)))
        pong = msgspec.msgpack.decode((await ws.receive()).data)
        await ws.close()
    assert reply["type"] == "SQL_QUERY_RESP"
    assert reply["payload"]["queryId"] == "q7"
    assert reply["payload"]["code"] == "LIMIT_EXCEEDED"
    assert "ran past" in reply["payload"]["error"]
    assert pong["type"] == "PONG"


async def test_http_sync_with_topguns_http_provider(
    tmp_path: Path, topgun_peer: tuple[str, Path]
) -> None:
    """Ops over POST /topgun/sync are acked, journaled and seen live by a WebSocket client;
    the provider's polls bring it what a WebSocket client wrote."""
    async with serve(tmp_path, journal=True) as srv:
        watcher = await start(topgun_peer, srv.ws_url, "watch", seconds=12, node_id="watcher")
        await watcher.until("ready")
        poller = await start(
            topgun_peer,
            srv.ws_url,
            "http",
            'put=h1={"name":"Hal"}',
            'put=h2={"name":"Hedy"}',
            seconds=12,
            node_id="poller",
        )
        await poller.until("ready")
        await watcher.until("maps", lambda line: set(line["users"]) == {"h1", "h2"})
        writer = await start(topgun_peer, srv.ws_url, "ops", 'put=w1={"name":"Web"}')
        await writer.until("synced")
        await writer.end()
        await poller.until(
            "http",
            lambda line: line["type"] == "SERVER_EVENT" and line["payload"]["key"] == "w1",
        )
        for c in (poller, watcher):
            await c.stop()
        stored = topgun_state(srv.runtime).core.maps.live_items("users")
    assert sorted(stored) == ["h1", "h2", "w1"]
    (ack,) = [e for e in poller.events("http") if e["type"] == "OP_ACK"]
    assert ack["payload"]["lastId"] == "2"
    events = [e["payload"] for e in poller.events("http") if e["type"] == "SERVER_EVENT"]
    assert {e["key"] for e in events} == {"h1", "h2", "w1"}
    assert next(e for e in events if e["key"] == "w1")["record"]["value"] == {"name": "Web"}


async def test_http_sync_refuses_bad_tokens_and_bodies_with_the_reason(tmp_path: Path) -> None:
    import aiohttp
    import msgspec

    auth = AuthConfig(hs256_secret=SECRET)
    good = {"clientId": "c", "clientHlc": {"millis": 1, "counter": 0, "nodeId": "c"}}
    token = issue_token(SECRET, "t", {}, maps={"*": ["read"]})
    async with (
        serve(tmp_path, insecure_dev=False, auth=auth) as srv,
        aiohttp.ClientSession() as http,
    ):
        url = f"{srv.url}/topgun/sync"
        answers = []
        for headers, body in (
            ({}, good),
            ({"Authorization": "Bearer not-a-jwt"}, good),
            ({"Authorization": f"Bearer {token}"}, {"clientId": 5}),
            ({"Authorization": f"Bearer {token}"}, good),
        ):
            async with http.post(url, data=msgspec.msgpack.encode(body), headers=headers) as resp:
                answers.append((resp.status, msgspec.msgpack.decode(await resp.read())))
    assert [status for status, _ in answers] == [401, 401, 400, 200]
    for _, reply in answers[:3]:
        assert reply["errors"][0]["message"]
    assert "errors" not in answers[3][1]
    assert answers[3][1]["serverHlc"]["millis"] > 0


async def test_the_event_journal_reads_committed_changes(
    tmp_path: Path, topgun_peer: tuple[str, Path]
) -> None:
    async with serve(tmp_path, journal=True) as srv:
        await _people(srv, topgun_peer)
        remover = await start(topgun_peer, srv.ws_url, "ops", "remove=u2")
        await remover.until("synced")
        await remover.end()
        reader = await start(topgun_peer, srv.ws_url, "calls", "journal", seconds=8)
        await reader.end()
    (result,) = reader.events("call")
    assert result["ok"] is True
    events = result["value"]
    assert [(e["mapName"], e["key"], e["type"]) for e in events] == [
        *(("users", k, "PUT") for k in PEOPLE),
        ("users", "u2", "DELETE"),
    ]
    sequences = [e["sequence"] for e in events]
    assert sequences == sorted(sequences)
    assert len(set(sequences)) == len(sequences)
    assert events[0]["value"] == PEOPLE["u1"]


async def test_the_event_journal_follows_commits_live(
    tmp_path: Path, topgun_peer: tuple[str, Path]
) -> None:
    async with serve(tmp_path, journal=True) as srv:
        await _people(srv, topgun_peer)  # history: not sent to a subscription from now
        watcher = await start(topgun_peer, srv.ws_url, "journal-watch", seconds=12)
        await watcher.until("ready")
        subs = topgun_state(srv.runtime).core.journal_subs
        while not (subs.any() and subs.placed()):  # JOURNAL_SUBSCRIBE has no reply
            await asyncio.sleep(0.02)
        writer = await start(
            topgun_peer,
            srv.ws_url,
            "ops",
            'put=n1={"name":"New"}',
            'put=u2={"name":"Bo","age":23}',
            "remove=u1",
        )
        await writer.until("synced")
        await writer.end()
        await watcher.until("journal", lambda line: line["key"] == "u1")
        await watcher.stop()
    seen = [(e["key"], e["type"], e["value"]) for e in watcher.events("journal")]
    assert seen == [
        ("n1", "PUT", {"name": "New"}),
        ("u2", "PUT", {"name": "Bo", "age": 23}),  # an update is a PUT, as TopGun's server says
        ("u1", "DELETE", None),
    ]
    assert [e["previousValue"] for e in watcher.events("journal")] == [None, None, None]


async def test_topguns_cluster_client_gets_a_partition_map_of_the_server(
    tmp_path: Path, topgun_peer: tuple[str, Path]
) -> None:
    async with serve(tmp_path) as srv:
        url = f"{srv.ws_url}/topgun"
        client = await start(
            topgun_peer, srv.ws_url, "--seeds", url, "cluster", 'put=k1={"a":1}', seconds=8
        )
        await client.until("synced")
        await client.stop()
        users = topgun_state(srv.runtime).core.maps.live_items("users")
    (first,) = client.events("cluster")
    assert first["routing"] is True
    assert first["version"] >= 1
    assert first["nodes"] == [["octosync", url, "ACTIVE"]]
    assert first["owners"] == {"octosync": 271}
    assert client.frames("out", "PARTITION_MAP_REQUEST")
    assert client.frames("in", "ERROR") == []
    assert set(users) == {"k1"}


async def test_hybrid_query_is_served_live_and_never_answered_with_an_error(
    tmp_path: Path, topgun_peer: tuple[str, Path]
) -> None:
    """TopGun's ``hybridQuery`` with a full-text predicate and a comparison: the server
    answers the subscription in its own ``HYBRID_QUERY_RESP`` (correlated, scored, the records
    the whole predicate picks) and sends a ``HYBRID_QUERY_DELTA`` when a record enters; the
    client's handle shows its own result at once and never gets an ``ERROR``."""
    docs = {
        "p1": {"title": "python tips", "year": 2024},
        "p2": {"title": "python history", "year": 2001},
        "p3": {"title": "rust notes", "year": 2024},
        "p4": {"title": "notes", "body": "python", "year": 2024},
    }
    ops = [f"put={k}={json.dumps(v)}" for k, v in docs.items()]
    async with serve(tmp_path, topgun_search=("users",)) as srv:
        writer = await start(topgun_peer, srv.ws_url, "ops", *ops)
        await writer.until("synced")
        await writer.end()
        seeker = await start(topgun_peer, srv.ws_url, "hybridquery", "python", "2020", seconds=12)
        await seeker.until("ready")
        await seeker.until("hybridrows")
        await seeker.until("frame", lambda line: line["type"] == "HYBRID_QUERY_RESP")
        more = {"title": "python again", "year": 2025}
        edit = await start(topgun_peer, srv.ws_url, "ops", f"put=p5={json.dumps(more)}")
        await edit.until("synced")
        await edit.end()
        await seeker.until(
            "frame",
            lambda line: (
                line["type"] == "HYBRID_QUERY_DELTA" and line["msg"]["payload"]["key"] == "p5"
            ),
        )
        await seeker.stop()
    (sub,) = seeker.frames("out", "HYBRID_QUERY_SUBSCRIBE")
    assert sub["payload"]["predicate"]["children"][0]["op"] == "match"
    (resp,) = seeker.frames("in", "HYBRID_QUERY_RESP")
    assert resp["payload"]["subscriptionId"] == sub["payload"]["subscriptionId"]
    results = resp["payload"]["results"]
    assert [r["key"] for r in results] == ["p1"]  # p2 too old, p3 no python, p4 not in title
    assert results[0]["value"] == docs["p1"]
    assert results[0]["score"] > 0
    assert results[0]["matchedTerms"] == ["python"]
    deltas = [d["payload"] for d in seeker.frames("in", "HYBRID_QUERY_DELTA")]
    assert {d["subscriptionId"] for d in deltas} == {sub["payload"]["subscriptionId"]}
    (entered,) = [d for d in deltas if d["key"] == "p5"]
    assert entered["type"] == "ENTER"
    assert entered["value"] == more
    # p1's BM25 score moves with the map's new word counts: an UPDATE, never a LEAVE
    assert {(d["key"], d["type"]) for d in deltas if d["key"] != "p5"} <= {("p1", "UPDATE")}
    assert seeker.frames("in", "ERROR") == []
