"""Building TopGun client messages for the core's tests."""

from __future__ import annotations

from typing import Any

import msgspec

from octosync.crdt.sync_messages import NIL, WireLWWRecord, WireTimestamp
from octosync.server.auth import ClaimGrants
from octosync.server.topgun_wire import encode
from octosync.topgun import Effects, TopGunCore
from octosync.wire import topgun as tg
from octosync.wire import topgun_services as sv

ALL = ClaimGrants(subject="all", everything=True)


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def put(
    op_id: str, key: str, value: Any, millis: int, node: str = "n1", counter: int = 0, **kw: Any
) -> tg.ClientOp:
    stamp = WireTimestamp(millis, counter, node)
    raw = NIL if value is None else msgspec.Raw(msgspec.msgpack.encode(value))
    return tg.ClientOp(
        map_name=kw.pop("map_name", "users"),
        key=key,
        id=op_id,
        op_type="REMOVE" if value is None else "PUT",
        record=WireLWWRecord(raw, stamp),
        timestamp=stamp,
        **kw,
    )


def or_add(op_id: str, key: str, value: Any, millis: int, node: str = "n1") -> tg.ClientOp:
    stamp = WireTimestamp(millis, 0, node)
    rec = tg.WireORRecord(msgspec.Raw(msgspec.msgpack.encode(value)), stamp, f"{millis}:0:{node}")
    return tg.ClientOp(
        map_name="tags", key=key, id=op_id, op_type="OR_ADD", or_record=rec, timestamp=stamp
    )


def or_remove(op_id: str, key: str, tag: str, millis: int, node: str = "n1") -> tg.ClientOp:
    stamp = WireTimestamp(millis, 0, node)
    return tg.ClientOp(
        map_name="tags", key=key, id=op_id, op_type="OR_REMOVE", or_tag=tag, timestamp=stamp
    )


def batch(*ops: tg.ClientOp, write_concern: str | None = None) -> tg.OpBatch:
    return tg.OpBatch(tg.OpBatchPayload(list(ops), write_concern=write_concern))


def sent(fx: Effects, conn: int) -> list[tg.Message]:
    """The messages ``fx`` sends now to ``conn``, decoded, in order."""
    return [tg.decode(encode(ob.message)) for ob in fx.out if conn in ob.targets]


def after_commit(fx: Effects, conn: int) -> list[tg.Message]:
    """The messages ``fx`` sends to ``conn`` once its records are committed, decoded."""
    return [tg.decode(encode(ob.message)) for ob in fx.durable if conn in ob.targets]


def core(*, persistent: bool = True, clock: Clock | None = None) -> TopGunCore:
    return TopGunCore(clock or Clock(), persistent=persistent)


def follow(view: dict[str, float], messages: list[tg.Message]) -> None:
    """Apply a live search's ``SEARCH_UPDATE``s to a client's view (key -> score)."""
    for m in messages:
        assert isinstance(m, sv.SearchUpdate)
        if m.payload.change_type == "LEAVE":
            del view[m.payload.key]
        else:
            view[m.payload.key] = m.payload.score
