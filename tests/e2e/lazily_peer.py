"""A real lazily-py replica, run by the interop tests under Python 3.12+ (``lazily`` 0.45).

``python lazily_peer.py WHERE STREAM PEER CLICKS TOTAL ENTRIES``: joins the multi-writer stream
STREAM over octosync's lazily TCP face (WHERE: its port) or its Unix socket (``unix:PATH``)
(u32 length-prefixed frames, feature ``distributed_crdt``), keeps its replica in lazily-py's
own ``CrdtPlaneRuntime`` (every frame decoded and encoded by ``lazily.ipc``), adds CLICKS to
the shared counter ``clicks`` one op at a time (its own entry ``clicks/pn/PEER``, the layout
of ``octosync.crdt.shared``), writes the register ``title``, then waits until the counter
reads TOTAL and the replica holds ENTRIES entries, and prints its converged entries as one
JSON line. This file imports nothing from
octosync: the peer knows only the lazily spec and the layout.
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import threading
import time

from lazily.crdt_plane import CrdtPlaneRuntime
from lazily.ipc import CapabilityHandshake, CrdtOp, CrdtSync, IpcMessage, NodeKey, WireStamp

FEATURE = "distributed_crdt"


def node_of(name: str) -> int:
    h = 0xCBF29CE484222325
    for byte in name.encode():
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFF_FFFF_FFFF_FFFF
    return h & 0xFFFF_FFFF_FFFF


class Link:
    """u32-framed frames on a socket this script dials itself (lazily-py's codecs are
    transport-agnostic: it brings no client that dials): TCP to a port, or ``unix:PATH``."""

    def __init__(self, where: str) -> None:
        if where.startswith("unix:"):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(30)
            self.sock.connect(where[len("unix:") :])
        else:
            self.sock = socket.create_connection(("127.0.0.1", int(where)), timeout=30)
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


def counter(runtime: CrdtPlaneRuntime) -> int:
    total = 0
    for entry in runtime.converged():
        if entry.key is not None and entry.key.path.startswith("clicks/pn/"):
            p, n = json.loads(entry.state)
            total += p - n
    return total


def main() -> None:
    port, stream = sys.argv[1], sys.argv[2]
    peer, clicks, total, entry_count = map(int, sys.argv[3:7])
    link = Link(port)
    hello = CapabilityHandshake.new(peer, stream).with_codec("json_tagged").with_features([FEATURE])
    link.send(json.dumps(hello.to_wire()).encode())
    reply = json.loads(link.recv())
    assert FEATURE in reply.get("features", []), reply
    runtime = CrdtPlaneRuntime(peer)
    lock = threading.Lock()
    acked = threading.Condition(lock)
    errors: list[object] = []

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
                acked.notify_all()

    threading.Thread(target=reader, daemon=True).start()
    node = node_of("clicks")
    logical = 0

    def write(key: str, node_id: int, state: bytes) -> None:
        nonlocal logical
        logical += 1
        stamp = WireStamp(wall_time=time.time_ns() // 1_000_000, logical=logical, peer=peer)
        op = CrdtOp.keyed(node_id, NodeKey.new(key), stamp, state)
        with lock:
            runtime.apply(op)
            frame = IpcMessage.of_crdt_sync(CrdtSync.new(runtime.frontier(), [op]))
        link.send(frame.encode_json())

    for i in range(1, clicks + 1):
        write(f"clicks/pn/{peer}", node, json.dumps([i, 0], separators=(",", ":")).encode())
        time.sleep(0.001)
    write("title/lww", node_of("title"), b'"from lazily-py"')
    deadline = time.monotonic() + 60
    with lock:
        while time.monotonic() < deadline and (
            counter(runtime) != total or len(runtime.converged()) < entry_count
        ):
            acked.wait(1.0)
        entries = sorted(
            [
                e.node,
                e.key.path if e.key else None,
                [e.stamp.wall_time, e.stamp.logical, e.stamp.peer],
                list(e.state),
            ]
            for e in runtime.converged()
        )
    print(json.dumps({"counter": counter(runtime), "entries": entries, "errors": errors}))


if __name__ == "__main__":
    main()
