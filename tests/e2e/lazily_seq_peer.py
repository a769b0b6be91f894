"""A real lazily-py list replica, run by the interop tests under Python 3.12+ (``lazily`` 0.45).

``python lazily_seq_peer.py PORT STREAM PEER``: joins the multi-writer stream STREAM over
octosync's lazily TCP face (feature ``distributed_crdt``), keeps the list ``items`` in
lazily-py's own ``SeqCrdt`` (lazily-spec's move-aware sequence) and the plane in its own
``CrdtPlaneRuntime``, every frame decoded and encoded by ``lazily.ipc``. The two meet through
the entry layout of docs/crdt.md: each ``SeqCrdt`` element is three LWW registers, and each
register is one plane entry carrying the register's own stamp (``items/lp/ID``: the position's
digits, its peer being the entry's stamp peer; ``items/lv/ID``: the value; ``items/ld/ID``:
``true`` once removed). Entries that arrive are folded into a ``SeqCrdt`` and merged with
``SeqCrdt.merge``; registers this peer stamped are sent as entries.

It waits for the three elements ``a``, ``b``, ``c``, then appends ``L1``, moves ``a`` after
``c`` and sets ``b`` to ``B``; then waits until another writer's ``P0`` is there and ``c`` is
gone, and prints its list as one JSON line. This file imports nothing from octosync.
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import threading
import time
from typing import Any

from lazily.crdt_plane import CrdtPlaneRuntime
from lazily.ipc import CapabilityHandshake, CrdtOp, CrdtSync, IpcMessage, NodeKey, WireStamp
from lazily.seqcrdt import Position, SeqCrdt, SeqElement, SeqStamp

FEATURE = "distributed_crdt"
NAME = "items"
_ZERO = SeqStamp(0, 0, 0)


def node_of(name: str) -> int:
    h = 0xCBF29CE484222325
    for byte in name.encode():
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFF_FFFF_FFFF_FFFF
    return h & 0xFFFF_FFFF_FFFF


def now() -> int:
    return time.time_ns() // 1_000_000


class Link:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.lock = threading.Lock()

    def send(self, data: bytes) -> None:
        with self.lock:
            self.sock.sendall(struct.pack(">I", len(data)) + data)

    def recv(self) -> bytes:
        head = self._exactly(4)
        return self._exactly(struct.unpack(">I", head)[0])

    def _exactly(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the server closed the connection")
            out += chunk
        return out


def seq_of_plane(runtime: CrdtPlaneRuntime) -> SeqCrdt[Any]:
    """The plane's list entries as a SeqCrdt of elements (for ``SeqCrdt.merge``)."""
    regs: dict[str, dict[str, Any]] = {}
    for entry in runtime.converged():
        path = entry.key.path if entry.key is not None else ""
        parts = path.split("/")
        if len(parts) != 3 or parts[0] != NAME or parts[1] not in ("lp", "lv", "ld"):
            continue
        stamp = SeqStamp(entry.stamp.wall_time, entry.stamp.logical, entry.stamp.peer)
        regs.setdefault(parts[2], {})[parts[1]] = (json.loads(entry.state), stamp)
    out: SeqCrdt[Any] = SeqCrdt(0)
    for eid, r in regs.items():
        if "lp" not in r or "lv" not in r:
            continue
        (frac, p_stamp), (value, v_stamp) = r["lp"], r["lv"]
        deleted, d_stamp = r.get("ld", (False, _ZERO))
        out._elements[eid] = SeqElement(
            eid,
            value,
            v_stamp,
            Position(tuple(frac), p_stamp.peer),
            p_stamp,
            deleted is True,
            d_stamp,
        )
    return out


def main() -> None:
    port, stream, peer = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    link = Link(port)
    hello = CapabilityHandshake.new(peer, stream).with_codec("json_tagged").with_features([FEATURE])
    link.send(json.dumps(hello.to_wire()).encode())
    reply = json.loads(link.recv())
    assert FEATURE in reply.get("features", []), reply
    runtime = CrdtPlaneRuntime(peer)
    seq: SeqCrdt[Any] = SeqCrdt(peer)
    lock = threading.Lock()
    changed = threading.Condition(lock)
    errors: list[object] = []
    sent: dict[str, SeqStamp] = {}

    def reader() -> None:
        while True:
            raw = link.recv()
            doc = json.loads(raw)
            if doc.get("type") == "error":
                errors.append(doc)
                continue
            message = IpcMessage.decode_json(raw)
            assert message.crdt_sync is not None
            with lock:
                runtime.apply_frame(message.crdt_sync)
                seq.merge(seq_of_plane(runtime), now())
                changed.notify_all()

    def publish() -> None:
        """Send every register this peer stamped since it last sent it (as plane entries)."""
        ops = []
        for e in seq._elements.values():
            registers = [
                ("lp", e.position_stamp, list(e.position.frac)),
                ("lv", e.value_stamp, e.value),
                ("ld", e.deleted_stamp, True if e.deleted else None),
            ]
            for kind, stamp, state in registers:
                key = f"{NAME}/{kind}/{e.id}"
                if stamp.peer != peer or state is None or sent.get(key, _ZERO) >= stamp:
                    continue
                sent[key] = stamp
                body = json.dumps(state, separators=(",", ":"), ensure_ascii=False).encode()
                wire = WireStamp(wall_time=stamp.wall, logical=stamp.logical, peer=stamp.peer)
                ops.append(CrdtOp.keyed(node_of(NAME), NodeKey.new(key), wire, body))
        for op in ops:
            runtime.apply(op)
        frame = IpcMessage.of_crdt_sync(CrdtSync.new(runtime.frontier(), ops))
        link.send(frame.encode_json())

    def by_value(value: str) -> str:
        return next(i for i in seq.order() if seq.get(i) == value)

    def wait(predicate: Any) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not predicate():
            changed.wait(1.0)

    threading.Thread(target=reader, daemon=True).start()
    with lock:
        wait(lambda: [seq.get(i) for i in seq.order()] == ["a", "b", "c"])
        seq.insert_back(f"{peer}.{now()}.0", "L1", now())
        seq.move_after(by_value("a"), by_value("c"), now())
        seq.set_value(by_value("b"), "B", now())
        publish()
        wait(
            lambda: (
                "P0" in [seq.get(i) for i in seq.order()] and "c" not in map(seq.get, seq.order())
            )
        )
        values = [seq.get(i) for i in seq.order()]
    print(json.dumps({"values": values, "errors": errors}))


if __name__ == "__main__":
    main()
