"""Node grants and restricted read views: what a view shows, and that its chain never breaks."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    precondition,
    rule,
)

from octosync.hub import Hub, HubConfig, ViewKey, lazily_frame
from octosync.hub.node_views import NodeRules, NodeView, node_label
from octosync.ipc.messages import (
    CellSet,
    Delta,
    DeltaOp,
    EdgeAdd,
    NodeAdd,
    NodeRemove,
    NodeSnapshot,
    ResyncRequest,
    Snapshot,
)
from octosync.ipc.mirror import Mirror
from tests.hub.helpers import decode, json_encoder

KEYS = {1: "pub/a", 2: "priv/b", 3: "pub/c", 4: "priv/d", 5: "pub/e", 6: None}
RULES = NodeRules(read=("pub/*",))


def test_patterns_match_keys_or_ids_and_grant_kinds_apart() -> None:
    rules = NodeRules(read=("board/*", "#7"), write=("players/alice/*",))
    assert rules.allows("read", 1, "board/x")
    assert rules.allows("read", 7, None)
    assert not rules.allows("read", 7, "board")  # a keyed node is matched by its key only
    assert not rules.allows("write", 1, "board/x")  # read never implies write
    assert rules.allows("write", 2, "players/alice/score")
    assert not rules.allows("trigger_effect", 7, None)
    assert node_label(7, None) == "#7"
    assert NodeRules(read=("a",), write=("b",)).view_name == NodeRules(read=("a",)).view_name
    assert NodeRules(read=("a",)).view_name != NodeRules(read=("b",)).view_name


def test_edges_and_roots_follow_their_nodes() -> None:
    view = NodeView(RULES)
    snap = Snapshot(
        3,
        (
            NodeSnapshot(1, "bytes", "resolved", b"x", "pub/a"),
            NodeSnapshot(2, "bytes", "resolved", b"y", "priv/b"),
        ),
        roots=(1, 2),
    )
    shown = view.live(snap)
    assert isinstance(shown, Snapshot)
    assert [n.slot_id for n in shown.nodes] == [1]
    assert shown.roots == (1,)
    hidden_edge = Delta(3, 4, (EdgeAdd(1, 2),))
    assert view.live(hidden_edge) is None
    both = Delta(4, 5, (NodeAdd(3, "bytes", b"z", "pub/c"), EdgeAdd(3, 1)))
    assert view.live(both) == Delta(3, 5, both.ops)


class ViewedStream(RuleBasedStateMachine):
    """A producer changes nodes some of which a view hides; subscribers of that view join,
    leave, drain and ask for resyncs at any point. Each one's real ``Mirror`` must follow
    without a gap and hold exactly the visible part of the producer's state."""

    subs = Bundle("subs")

    def __init__(self) -> None:
        super().__init__()
        self.hub = Hub(HubConfig(), clock=lambda: 0.0, encoders={"json": json_encoder})
        self.hub.register_view(RULES.view_name, lambda: NodeView(RULES))
        self.view = ViewKey("lazily", "json", RULES.view_name)
        self.hub.connect(1, ViewKey("lazily", "json"))
        self.state: dict[int, bytes] = {1: b"a0", 2: b"b0"}
        self.epoch = 0
        self.hub.publish(1, "s", lazily_frame(self._snapshot()))
        self.mirrors: dict[int, Mirror] = {}
        self.next_conn = 10

    def _snapshot(self) -> Snapshot:
        nodes = tuple(
            NodeSnapshot(sid, "bytes", "resolved", v, KEYS[sid])
            for sid, v in sorted(self.state.items())
        )
        return Snapshot(self.epoch, nodes, roots=tuple(sorted(self.state)))

    def _flush(self, ops: list[DeltaOp]) -> None:
        self.hub.publish(1, "s", lazily_frame(Delta(self.epoch, self.epoch + 1, tuple(ops))))
        self.epoch += 1

    @rule(node=st.sampled_from(sorted(KEYS)), value=st.binary(min_size=1, max_size=3))
    def set_or_add(self, node: int, value: bytes) -> None:
        op: DeltaOp = (
            CellSet(node, value)
            if node in self.state
            else NodeAdd(node, "bytes", value, KEYS[node])
        )
        self.state[node] = value
        self._flush([op])

    @rule(nodes=st.sets(st.sampled_from(sorted(KEYS)), min_size=2, max_size=4))
    def set_several_in_one_flush(self, nodes: set[int]) -> None:
        ops: list[DeltaOp] = []
        for node in sorted(nodes):
            value = b"m%d" % self.epoch
            ops.append(
                CellSet(node, value)
                if node in self.state
                else NodeAdd(node, "bytes", value, KEYS[node])
            )
            self.state[node] = value
        self._flush(ops)

    @precondition(lambda self: len(self.state) > 1)
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        node = data.draw(st.sampled_from(sorted(self.state)))
        del self.state[node]
        self._flush([NodeRemove(node)])

    @rule()
    def resnapshot(self) -> None:
        self.epoch += 1
        self.hub.publish(1, "s", lazily_frame(self._snapshot()))

    @rule(target=subs)
    def join(self) -> int:
        conn = self.next_conn
        self.next_conn += 1
        self.hub.connect(conn, self.view)
        self.hub.subscribe(conn, "s")
        self.mirrors[conn] = Mirror()
        return conn

    @rule(conn=consumes(subs))
    def leave(self, conn: int) -> None:
        self.hub.disconnect(conn)
        del self.mirrors[conn]

    @rule(conn=subs)
    def resync(self, conn: int) -> None:
        self.hub.resync(conn, "s")

    @rule(conn=subs)
    def drain(self, conn: int) -> None:
        mirror = self.mirrors[conn]
        for raw in self.hub.take(conn):
            result = mirror.apply(decode(raw))
            assert not isinstance(result, ResyncRequest), mirror.last_error
        assert mirror.in_sync
        visible = {sid: v for sid, v in self.state.items() if RULES.allows("read", sid, KEYS[sid])}
        shown = {n.slot_id: n.payload for n in mirror.nodes}
        assert shown == visible

    @invariant()
    def hidden_nodes_never_reach_a_subscriber(self) -> None:
        for mirror in self.mirrors.values():
            for node in mirror.nodes:
                assert node.key is not None
                assert node.key.startswith("pub/")


ViewedStream.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_viewed_stream = ViewedStream.TestCase
