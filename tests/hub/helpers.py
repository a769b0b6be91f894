"""Shared test helpers: a JSON encoder for hub out-frames and a tiny reference subscriber."""

from __future__ import annotations

import msgspec

from octosync.hub import OutFrame
from octosync.ipc.messages import CellSet, Delta, NodeAdd, NodeSnapshot, Snapshot

_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder(Snapshot | Delta)


def json_encoder(frame: OutFrame) -> bytes:
    assert isinstance(frame.body, Snapshot | Delta)
    return _enc.encode(frame.body)


def decode(data: bytes) -> Snapshot | Delta:
    return _dec.decode(data)


def snap(epoch: int, values: dict[int, bytes]) -> Snapshot:
    return Snapshot(
        epoch=epoch,
        nodes=tuple(NodeSnapshot(k, "bytes", "resolved", v) for k, v in sorted(values.items())),
        roots=tuple(sorted(values)),
    )


def cell_set(base: int, sid: int, value: bytes) -> Delta:
    return Delta(base_epoch=base, epoch=base + 1, ops=(CellSet(slot_id=sid, payload=value),))


def node_add(base: int, sid: int, value: bytes) -> Delta:
    return Delta(
        base_epoch=base,
        epoch=base + 1,
        ops=(NodeAdd(slot_id=sid, type_tag="bytes", payload=value),),
    )


class RefSubscriber:
    """Applies what a subscriber receives, the way a real mirror would, and records gaps."""

    def __init__(self) -> None:
        self.epoch: int | None = None
        self.values: dict[int, bytes] = {}
        self.gaps = 0

    def feed(self, frames: list[bytes]) -> None:
        for raw in frames:
            msg = decode(raw)
            if isinstance(msg, Snapshot):
                self.epoch = msg.epoch
                self.values = {
                    n.slot_id: n.payload for n in msg.nodes if isinstance(n.payload, bytes)
                }
                continue
            if self.epoch != msg.base_epoch:
                self.gaps += 1
                continue
            for op in msg.ops:
                if isinstance(op, CellSet | NodeAdd) and isinstance(op.payload, bytes):
                    self.values[op.slot_id] = op.payload
            self.epoch = msg.epoch
