"""lazily-py (``lazily`` 0.45) on octosync's state plane, run by the interop tests under 3.12+.

``python lazily_state_peer.py publish WHERE STREAM``: publishes STREAM (a snapshot of nodes 1
and 2, then two deltas) built and encoded by ``lazily.ipc`` (``json_tagged``).
``python lazily_state_peer.py follow WHERE STREAM EPOCH``: subscribes to STREAM, applies what
arrives as lazily-py's receiver decides (``Delta.apply_status``), and once at EPOCH prints
the values as one JSON line (node -> hex).

WHERE is ``unix:PATH`` (octosync's ``--lazily-socket``) or a TCP port (``--tcp-port``); frames
are u32 length-prefixed. lazily-py brings no transport of its own, so this script dials the
socket; every frame is lazily-py's. It imports nothing from octosync.
"""

from __future__ import annotations

import json
import socket
import struct
import sys

from lazily.ipc import (
    CapabilityHandshake,
    Delta,
    DeltaApplyStatusKind,
    DeltaOp_CellSet,
    IpcMessage,
    IpcValue,
    IpcValue_Inline,
    NodeSnapshot,
    NodeState_Payload,
    Snapshot,
)


def dial(where: str) -> socket.socket:
    if where.startswith("unix:"):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(30)
        sock.connect(where[len("unix:") :])
        return sock
    return socket.create_connection(("127.0.0.1", int(where)), timeout=30)


def send(sock: socket.socket, data: bytes) -> None:
    sock.sendall(struct.pack(">I", len(data)) + data)


def recv(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the server closed the connection")
            out += chunk
        return out

    return exactly(struct.unpack(">I", exactly(4))[0])


def join(where: str, stream: str, features: list[str]) -> socket.socket:
    sock = dial(where)
    hello = CapabilityHandshake.new(77, stream).with_codec("json_tagged").with_features(features)
    send(sock, json.dumps(hello.to_wire()).encode())
    reply = json.loads(recv(sock))
    assert reply.get("session_id") == stream, reply
    return sock


def publish(where: str, stream: str) -> None:
    sock = join(where, stream, ["publish"])
    nodes = [NodeSnapshot.payload(1, "bytes", b"a"), NodeSnapshot.payload(2, "bytes", b"b")]
    send(sock, IpcMessage.of_snapshot(Snapshot(0, nodes, [], [1, 2])).encode_json())
    for base, (node, value) in enumerate([(1, b"one"), (2, b"two")]):
        delta = Delta.next(base, [DeltaOp_CellSet(node, IpcValue.of(value))])
        send(sock, IpcMessage.of_delta(delta).encode_json())
    sock.shutdown(socket.SHUT_WR)
    sock.recv(1)  # the server read every frame before it saw the end


def follow(where: str, stream: str, epoch: int) -> None:
    sock = join(where, stream, [])
    last: int | None = None
    values: dict[int, bytes] = {}
    while last != epoch:
        message = IpcMessage.decode_json(recv(sock))
        if message.snapshot is not None:
            last = message.snapshot.epoch
            values = {
                n.node: n.state.data
                for n in message.snapshot.nodes
                if isinstance(n.state, NodeState_Payload)
            }
        elif message.delta is not None and last is not None:
            status = message.delta.apply_status(last)
            assert status.kind is DeltaApplyStatusKind.APPLY, status
            for op in message.delta.ops:
                if isinstance(op, DeltaOp_CellSet) and isinstance(op.payload, IpcValue_Inline):
                    values[op.node] = op.payload.data
            last = message.delta.epoch
    print(json.dumps({"epoch": last, "values": {str(k): v.hex() for k, v in values.items()}}))


if __name__ == "__main__":
    if sys.argv[1] == "publish":
        publish(sys.argv[2], sys.argv[3])
    else:
        follow(sys.argv[2], sys.argv[3], int(sys.argv[4]))
