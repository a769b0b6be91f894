"""A client's write batch: checked, applied, journaled, fanned out and acknowledged (sans-I/O).

Write concerns (TopGun's ``WriteConcern``, lowest to highest): ``FIRE_AND_FORGET`` is
acknowledged on receipt (the ack is the first thing sent, before the ops are applied);
``MEMORY`` (the default) once the op is validated and in memory, ``APPLIED`` once merged into
the map; both are immediate here because validation and the merge happen in the same step.
``PERSISTED`` waits for the journal's group commit. ``REPLICATED`` is a cluster's: with
``replicated`` set (``serve --cluster``) every op that changed a map goes to ``replicate`` (the
cluster's op stream, ``cluster.maps``), and a ``REPLICATED`` batch puts every valid op there,
changed or not (a client resending what this node has already must not get an ack for what the
cluster never stored), with its ack in ``replicated``: sent once the cluster stored them. A
``PERSISTED`` ack in a cluster waits for both. Alone, ``REPLICATED`` is achieved as
``APPLIED`` with ``success: false``, as is ``PERSISTED`` on a server without a journal: the
ack says what was achieved, never more. One ``OP_ACK`` per batch, at the batch's
strongest requested level; ``results`` (per op) are sent when a level was asked for
explicitly. Ops the token may not write (or whose value is invalid) get ``OP_REJECTED`` and
are not applied; the ack neither lists them nor covers them by ``lastId``, so the real client
keeps them pending (TopGun's server acks no refused op either), and the accepted ops of the
batch are acknowledged through ``results``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from octosync.crdt.op import MAX_MAP_NAME, OpKind, OpRecord
from octosync.errors import CrdtValueError, DecodeError, InvalidRecord
from octosync.store.records import EncodedRecord, encode_op_records, encode_record
from octosync.topgun import durable
from octosync.topgun.access import Conn
from octosync.topgun.core_view import CoreView
from octosync.topgun.effects import AllSucceeded, Effects, Outbound, Wire
from octosync.topgun.op_events import op_event
from octosync.wire import topgun as tg

LEVELS = ("FIRE_AND_FORGET", "MEMORY", "APPLIED", "REPLICATED", "PERSISTED")
RANK = {level: i for i, level in enumerate(LEVELS)}
DEFAULT_LEVEL = "MEMORY"
FORBIDDEN_CODE = 403
_LEADING_INT = re.compile(r"\s*[+-]?\d+")
_PUT = OpKind.PUT


def write(
    core: CoreView,
    fx: Effects,
    conn: int,
    c: Conn,
    ops: list[tg.ClientOp],
    batch_level: str | None,
) -> None:
    per_op = any(op.write_concern for op in ops)
    if batch_level is not None and batch_level not in RANK:
        raise DecodeError(
            f"unknown write concern {batch_level!r}, expected one of {LEVELS}",
            path="payload.writeConcern",
        )
    wanted = (batch_level or DEFAULT_LEVEL) if ops else DEFAULT_LEVEL
    if per_op:
        levels: list[str] = []
        for i, op in enumerate(ops):
            level = op.write_concern or batch_level or DEFAULT_LEVEL
            if level not in RANK:
                raise DecodeError(
                    f"unknown write concern {level!r}, expected one of {LEVELS}",
                    path=f"payload.ops[{i}].writeConcern",
                )
            levels.append(level)
        wanted = max(levels, key=RANK.__getitem__)
    if core.acks_replicated and core.replicated and wanted in ("MEMORY", "APPLIED"):
        wanted = "REPLICATED"
    explicit = batch_level is not None or per_op
    last_id = next((op.id for op in reversed(ops) if op.id is not None), None)
    ack_at = len(fx.out)  # a FIRE_AND_FORGET ack goes first, once refusals are known
    errors: dict[int, str] = {}
    index, kept, recs, encoded = _validated(core, fx, conn, c, ops, errors)
    if recs:
        core.maps.hlc.update(max(rec.ts for rec in recs))
    outcomes = core.maps.apply_many(recs)
    if outcomes.count(True) == len(outcomes):  # every op changed state: the usual batch
        fx.records.extend(encoded)
        events = [
            tg.ServerEventPayload(op.map_name, "PUT", op.key, record=op.record)
            if rec.op is _PUT and op.record is not None
            else op_event(op, rec)
            for op, rec in zip(kept, recs, strict=True)
        ]
        if core.replicated:
            fx.replicate.extend(encoded)
    else:
        events = []
        for i, op, rec, enc, outcome in zip(index, kept, recs, encoded, outcomes, strict=True):
            if outcome is True:
                fx.records.append(enc)
                events.append(op_event(op, rec))
            elif isinstance(outcome, CrdtValueError):
                reason = f"{outcome.name}: {outcome.message}"
                _reject(fx, conn, op, errors, i, reason, 400)
                continue
            if core.replicated and (outcome is True or RANK[wanted] >= RANK["REPLICATED"]):
                fx.replicate.append(enc)
    core.fan_out(fx, conn, events)
    if last_id is None:
        return
    if errors:
        last_id = covered_last_id(ops, errors)
    if wanted == "FIRE_AND_FORGET":
        ack = _ack(last_id, wanted, ops, errors, explicit, True)
        fx.out.insert(ack_at, Outbound((conn,), ack))
        return
    if wanted == "REPLICATED" and core.replicated:
        fx.replicated.append(Outbound((conn,), _ack(last_id, wanted, ops, errors, explicit)))
        return
    if wanted == "PERSISTED" and core.persistent:
        fx.durable.append(Outbound((conn,), _ack(last_id, wanted, ops, errors, explicit)))
        return
    achieved = wanted if wanted in ("MEMORY", "APPLIED") else "APPLIED"
    ack = _ack(last_id, achieved, ops, errors, explicit, achieved == wanted)
    fx.out.append(Outbound((conn,), ack))


def _validated(
    core: CoreView,
    fx: Effects,
    conn: int,
    c: Conn,
    ops: list[tg.ClientOp],
    errors: dict[int, str],
) -> tuple[list[int], list[tg.ClientOp], list[OpRecord], list[EncodedRecord]]:
    """The ops the token may write, as records validated for the journal (one strict
    decode for the batch), in parallel lists (index in the batch, op, record, encoded
    record); the others rejected. Nothing is applied yet."""
    allowed: dict[str, bool] = {}
    index: list[int] = []
    kept: list[tg.ClientOp] = []
    recs: list[OpRecord] = []
    to_record = tg.client_op_to_record
    for i, op in enumerate(ops):
        name = op.map_name
        may = allowed.get(name)
        if may is None:
            may = allowed[name] = (
                0 < len(name) <= MAX_MAP_NAME
                and not durable.is_reserved(name)
                and c.grants.may_map(name, "write")
            )
            if may and c.grants.may_map(name, "read"):
                c.maps.add(name)
        if not may:
            reason = (
                f"no write grant on map {name!r}"
                if 0 < len(name) <= MAX_MAP_NAME
                else f"a map name has 1 to {MAX_MAP_NAME} characters, not {len(name)}"
            )
            _reject(fx, conn, op, errors, i, reason, FORBIDDEN_CODE)
            continue
        try:
            rec = to_record(op)
        except DecodeError as err:
            _reject(fx, conn, op, errors, i, f"{err.name}: {err.message}", 400)
            continue
        index.append(i)
        kept.append(op)
        recs.append(rec)
    try:
        return index, kept, recs, encode_op_records(recs)
    except InvalidRecord:
        pass
    out: tuple[list[int], list[tg.ClientOp], list[OpRecord], list[EncodedRecord]]
    out = ([], [], [], [])
    for i, op, rec in zip(index, kept, recs, strict=True):  # find which: the slow path, rare
        try:
            enc = encode_record(rec)
        except InvalidRecord as err:
            _reject(fx, conn, op, errors, i, f"{err.name}: {err.message}", 400)
            continue
        out[0].append(i)
        out[1].append(op)
        out[2].append(rec)
        out[3].append(enc)
    return out


def _reject(
    fx: Effects,
    conn: int,
    op: tg.ClientOp,
    errors: dict[int, str],
    i: int,
    reason: str,
    code: int,
) -> None:
    errors[i] = reason
    fx.send(conn, tg.OpRejected(tg.OpRejectedPayload(op.id or "", reason, code)))


def _ack(
    last_id: str,
    level: str,
    ops: list[tg.ClientOp],
    errors: dict[int, str],
    explicit: bool,
    reached: bool = True,
) -> Wire:
    """The ``OP_ACK``; with an explicit write concern, or when some op was refused,
    it lists the result of every op that was not refused. A refused op is never listed
    (the real client marks every listed op synced, whatever its ``success``) and never
    covered by ``lastId`` (:func:`covered_last_id`): it stays pending in the client."""
    if not explicit and not errors:
        return tg.OpAck(tg.OpAckPayload(last_id, level))
    if reached and not errors:  # the usual batch: every op applied at the level asked
        return AllSucceeded(last_id, level, [op.id or "" for op in ops])
    short = None if reached else f"only {level} could be achieved"
    results = [
        tg.OpResult(op.id, short is None, level, error=short)
        for i, op in enumerate(ops)
        if i not in errors and op.id is not None
    ]
    return tg.OpAck(tg.OpAckPayload(last_id, level, results))


def _client_int(op_id: str | None) -> int | None:
    """An op id as the real client reads it (``parseInt``: leading decimal digits), None when
    it has none."""
    digits = _LEADING_INT.match(op_id or "")
    return None if digits is None else int(digits.group())


def covered_last_id(ops: Sequence[tg.ClientOp], errors: Mapping[int, str]) -> str:
    """The ``lastId`` of a batch with refused ops: the greatest id of an accepted op below
    every refused op's id, or else ``"0"`` (the client marks every op with ``id <= lastId``
    synced, and its ids start at 1). Accepted ops above it are acknowledged by ``results``."""
    floor = min((n for i in errors if (n := _client_int(ops[i].id)) is not None), default=None)
    best: tuple[int, str] | None = None
    for i, op in enumerate(ops):
        n = _client_int(op.id)
        if i in errors or n is None or op.id is None or (floor is not None and n >= floor):
            continue
        if best is None or n > best[0]:
            best = (n, op.id)
    if best is not None:
        return best[1]
    return "0" if floor is None or floor > 0 else str(floor - 1)
