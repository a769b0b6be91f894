"""Yjs documents across nodes, as a state machine over the real sans-I/O parts: each node's
``YjsDocuments``, its stream ``Position`` and its ``YjsRepair``, with the op stream and the
journals in memory. Writers on every node, updates the stream never stored (their publish
failed after the journal took them), restarts (the document rebuilt from the journal, the
stream replayed from the journaled position, so updates come again), a purged stream and
anti-entropy rounds in any order: once every node has read the stream and repaired, every
node holds the same document, with every update any writer sent."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from pycrdt import Doc, Text

from octosync.cluster.rounds import Position
from octosync.cluster.yjs import YjsRepair, YjsRepairTiming, read_state_vector
from octosync.yjs.documents import YjsDocuments

DOC = "notes"
NODES = 3


@dataclass
class Node:
    name: str
    runs: int = 0
    journal: list[tuple[bytes, int | None]] = field(default_factory=list)
    core: YjsDocuments = field(default_factory=YjsDocuments)
    intake: Position = field(default_factory=lambda: Position("boot"))
    repair: YjsRepair | None = None


def text(doc: Doc[Any]) -> str:
    return str(doc.get("t", type=Text))


class ClusterYjs(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.clock = 0.0
        self.stream: list[tuple[str, bytes]] = []  # (boot, update), sequence = index + 1
        self.purged = 0  # sequences up to this are gone from the stream
        self.nodes = [Node(f"n{i}") for i in range(NODES)]
        self.writers = [Doc(client_id=100 + i) for i in range(NODES)]
        self.everything: Doc[Any] = Doc()  # every update any writer sent
        for node in self.nodes:
            self._boot(node)

    def _boot(self, node: Node) -> None:
        """Start (again): the document from the journal, the stream from its position."""
        node.runs += 1
        node.core = YjsDocuments()
        node.core.restore(DOC, (u for u, _ in node.journal))
        position = max((p for _, p in node.journal if p is not None), default=0)
        node.intake = Position(f"{node.name}-{node.runs}", position)
        timing = YjsRepairTiming(interval=1.0, settle=1.0, max_push_bytes=1 << 20)
        node.repair = YjsRepair(node.name, lambda: self.clock, timing)

    def _written(self, i: int, piece: str) -> bytes:
        """Writer ``i`` appends ``piece``; an upper-case piece deletes its first character
        instead (when it has one), so delete sets differ too."""
        writer = self.writers[i]
        before = writer.get_state()
        t = writer.get("t", type=Text)
        if piece.isupper() and len(t):
            del t[0:1]
        else:
            t.insert(len(t), piece)
        update: bytes = writer.get_update(before)
        self.everything.apply_update(update)
        return update

    @rule(i=st.integers(0, NODES - 1), piece=st.text("xyzX", min_size=1, max_size=3))
    def write(self, i: int, piece: str) -> None:
        """Journaled on node ``i``, stored in the stream, then applied and confirmed."""
        node = self.nodes[i]
        update = self._written(i, piece)
        node.journal.append((update, None))
        self.stream.append((node.intake.node, update))
        node.core.document(DOC).doc.apply_update(update)
        assert node.repair is not None
        node.repair.written([DOC])
        self.clock += 0.1

    @rule(i=st.integers(0, NODES - 1), piece=st.text("xyzX", min_size=1, max_size=3))
    def write_never_stored(self, i: int, piece: str) -> None:
        """Journaled on node ``i``; its publish never got an ack (the writer was reset, told
        nothing). Only anti-entropy carries it to the other nodes."""
        update = self._written(i, piece)
        self.nodes[i].journal.append((update, None))
        self.nodes[i].core.document(DOC).doc.apply_update(update)

    @rule(i=st.integers(0, NODES - 1), k=st.integers(1, 5))
    def read_stream(self, i: int, k: int) -> None:
        node = self.nodes[i]
        start = max(node.intake.position, self.purged)
        for seq in range(start + 1, min(len(self.stream), start + k) + 1):
            boot, update = self.stream[seq - 1]
            if node.intake.admit(seq, boot):  # this run's own updates are passed over
                node.core.apply_remote(DOC, update)
                node.journal.append((update, node.intake.position))

    @rule(i=st.integers(0, NODES - 1))
    def restart(self, i: int) -> None:
        self._boot(self.nodes[i])

    @rule()
    def purge(self) -> None:
        self.purged = len(self.stream)

    @rule(a=st.integers(0, NODES - 1), b=st.integers(0, NODES - 1))
    def repair_round(self, a: int, b: int) -> None:
        """``a`` broadcasts its vectors (once its document settled); ``b`` pushes and asks."""
        self.clock += 5.0
        x, y = self.nodes[a], self.nodes[b]
        assert x.repair is not None
        assert y.repair is not None
        heard = y.repair.heard(x.name, x.repair.vectors(x.core.docs()), y.core.docs())
        for push in heard.pushes:
            x.core.apply_remote(push.document, push.update)
            x.journal.append((push.update, None))
        answered = x.repair.heard(y.name, heard.asks, x.core.docs(), answer_only=True)
        assert not answered.asks
        for push in answered.pushes:
            y.core.apply_remote(push.document, push.update)
            y.journal.append((push.update, None))

    @invariant()
    def nothing_a_node_holds_is_foreign(self) -> None:
        """A node holds only what writers sent: no client's clock past the writers' own."""
        sent = read_state_vector(self.everything.get_state())
        for node in self.nodes:
            if DOC in node.core.documents:
                held = read_state_vector(node.core.documents[DOC].doc.get_state())
                assert all(clock <= sent.get(client, 0) for client, clock in held.items())

    def teardown(self) -> None:
        """Every node reads the rest of the stream, then two repair rounds between every
        pair: all hold the same document, with every update."""
        if not hasattr(self, "nodes"):
            return
        for i in range(NODES):
            self.read_stream(i, len(self.stream) + 1)
        for _ in range(2):
            for a in range(NODES):
                for b in range(NODES):
                    if a != b:
                        self.repair_round(a, b)
        want = text(self.everything)
        for node in self.nodes:
            assert text(node.core.document(DOC).doc) == want, node.name


ClusterYjs.TestCase.settings = settings(max_examples=250, stateful_step_count=25, deadline=None)
test_cluster_yjs = ClusterYjs.TestCase
