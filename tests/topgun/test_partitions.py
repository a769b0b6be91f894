"""TopGun's partition map: partitions dealt round-robin over the nodes alive, a backup on
another node, a version that moves with every change of nodes, and the request answered."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.errors import FeatureDisabled
from octosync.topgun import TopGunCore
from octosync.topgun.partitions import PARTITION_COUNT, PartitionTable, partition_of
from octosync.wire import topgun_services as sv
from tests.topgun.helpers import ALL, Clock, core, sent

NODE_IDS = st.lists(
    st.text("abcdefgh", min_size=1, max_size=4), min_size=1, max_size=6, unique=True
)


@given(NODE_IDS, st.data())
def test_the_node_asked_owns_every_partition_with_the_next_nodes_as_backups(
    ids: list[str], data: st.DataObject
) -> None:
    table = PartitionTable()
    table.observe(((n, f"ws://{n}:1/topgun") for n in ids), 1_000)
    asked = data.draw(st.sampled_from(ids))
    payload = table.payload(1_000, asked)
    assert payload.partition_count == PARTITION_COUNT
    assert [p.partition_id for p in payload.partitions] == list(range(PARTITION_COUNT))
    ordered = sorted(ids)
    after = ordered[ordered.index(asked) + 1 :] + ordered[: ordered.index(asked)]
    for p in payload.partitions:
        assert p.owner_node_id == asked
        assert p.backup_node_ids == after[:1]
    assert {(n.node_id, n.endpoints.websocket, n.status) for n in payload.nodes} == {
        (n, f"ws://{n}:1/topgun", "ACTIVE") for n in ids
    }


def test_a_node_not_listed_hands_out_the_first_node_alive() -> None:
    table = PartitionTable()
    table.observe([("b", "ws://b/topgun"), ("a", "ws://a/topgun")], 1_000)
    assert {p.owner_node_id for p in table.payload(1_000, "gone").partitions} == {"a"}
    assert PartitionTable().payload(1_000, "a").partitions == []


def test_the_version_moves_only_when_the_nodes_change_and_never_back() -> None:
    table = PartitionTable()
    table.observe([("a", "ws://a/topgun")], 5_000)
    first = table.version
    assert first >= 1
    table.observe([("a", "ws://a/topgun")], 9_000)
    assert table.version == first
    table.observe([("a", "ws://a/topgun"), ("b", "ws://b/topgun")], 6_000)  # clock went back
    assert table.version == first + 1
    table.observe([("b", "ws://b/topgun")], 20_000)
    assert table.version == 20  # at least the second of the change


def test_keys_hash_as_topguns_client_does() -> None:
    # FNV-1a 32-bit's published test vectors, mod 271 (TopGun's hashString, PARTITION_COUNT)
    assert partition_of("") == 2166136261 % PARTITION_COUNT
    assert partition_of("a") == 0xE40C292C % PARTITION_COUNT
    assert partition_of("foobar") == 0xBF9CF968 % PARTITION_COUNT


def test_a_request_is_answered_with_the_map_or_refused_without_nodes() -> None:
    c = core()
    c.connect(1, ALL)
    ask = sv.PartitionMapRequest(sv.PartitionMapRequestPayload(current_version=0))
    with pytest.raises(FeatureDisabled, match="partition map"):
        c.handle(1, ask)  # the session answers it as an ERROR
    c.nodes = lambda: [("octosync", "ws://127.0.0.1:8765/topgun")]
    (answer,) = sent(c.handle(1, ask), 1)
    assert isinstance(answer, sv.PartitionMap)
    assert {p.owner_node_id for p in answer.payload.partitions} == {"octosync"}
    assert answer.payload.nodes[0].endpoints.websocket == "ws://127.0.0.1:8765/topgun"


def test_a_change_of_nodes_is_pushed_to_every_connection_on_the_tick() -> None:
    clock = Clock(5_000)
    c = TopGunCore(clock, persistent=True, node_id="n2")
    alive = [("n1", "ws://n1/topgun"), ("n2", "ws://n2/topgun")]
    c.nodes = lambda: list(alive)
    c.connect(1, ALL)
    c.connect(2, ALL)
    assert sent(c.tick(), 1) == []  # the first view: nobody holds an older map
    clock.now = 6_000
    assert sent(c.tick(), 1) == []  # nothing changed
    before = c.partitions.version
    del alive[0]  # n1 lost
    clock.now = 9_000
    fx = c.tick()
    for conn in (1, 2):  # also to a connection that never asked for a map
        (pushed,) = sent(fx, conn)
        assert isinstance(pushed, sv.PartitionMap)
        assert pushed.payload.version > before
        assert [n.node_id for n in pushed.payload.nodes] == ["n2"]
        assert {p.owner_node_id for p in pushed.payload.partitions} == {"n2"}
    assert sent(c.tick(), 1) == []  # pushed once


def test_without_nodes_nothing_is_pushed() -> None:
    c = core()
    c.connect(1, ALL)
    assert sent(c.tick(), 1) == []
