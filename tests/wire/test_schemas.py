"""What the tagged encoder writes validates against lazily-spec's JSON Schemas (for messages
inside the spec: no octosync extension states, no state hash).

The schemas are read from ``../shared`` (schema text is not copied into the project), so these
tests skip without it (fail under ``OCTOSYNC_REQUIRE_PEERS=1``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from octosync.ipc.messages import (
    CrdtSync,
    Delta,
    IpcMessage,
    NodeAdd,
    NodeSnapshot,
    OutboxAck,
    ResyncRequest,
    Snapshot,
)
from octosync.wire import json_tagged
from tests.strategies import ipc_messages

SCHEMA_FOR = {
    Snapshot: "snapshot.json",
    Delta: "delta.json",
    ResyncRequest: "reliable-sync.json",
    OutboxAck: "reliable-sync.json",
    CrdtSync: "distributed.json",
}


@pytest.fixture(scope="module")
def validators(lazily_schemas_dir: Path) -> dict[str, Draft202012Validator]:
    docs = {p.name: json.loads(p.read_text()) for p in sorted(lazily_schemas_dir.glob("*.json"))}
    registry: Registry[Any] = Registry().with_resources(
        (doc["$id"], Resource.from_contents(doc)) for doc in docs.values()
    )
    return {name: Draft202012Validator(doc, registry=registry) for name, doc in docs.items()}


def in_spec(message: IpcMessage) -> IpcMessage:
    """The same message without octosync's extensions (Dirty/Unset states, state hashes)."""
    if isinstance(message, Snapshot):
        nodes = tuple(
            n
            if n.state in ("resolved", "opaque")
            else NodeSnapshot(n.slot_id, n.type_tag, "opaque")
            for n in message.nodes
        )
        return msgspec.structs.replace(message, nodes=nodes, state_hash=None)
    if isinstance(message, Delta):
        ops = tuple(
            msgspec.structs.replace(op, state="opaque")
            if isinstance(op, NodeAdd) and op.payload is None
            else op
            for op in message.ops
        )
        return msgspec.structs.replace(message, ops=ops, state_hash=None)
    return message


@given(ipc_messages(tagged=True))
def test_encoder_output_validates(
    validators: dict[str, Draft202012Validator], message: IpcMessage
) -> None:
    message = in_spec(message)
    doc = json.loads(json_tagged.encode(message))
    validators[SCHEMA_FOR[type(message)]].validate(doc)


@pytest.mark.parametrize(
    "message",
    [
        Snapshot(1, (NodeSnapshot(1, "i32", "dirty"),)),
        Snapshot(1, state_hash=bytes(32)),
        Delta(0, 1, (NodeAdd(1, "i32", None, None, "unset"),)),
    ],
)
def test_extensions_are_outside_the_spec_schema(
    validators: dict[str, Draft202012Validator], message: IpcMessage
) -> None:
    doc = json.loads(json_tagged.encode(message))
    assert not validators[SCHEMA_FOR[type(message)]].is_valid(doc)


def test_schema_set_is_complete(validators: dict[str, Draft202012Validator]) -> None:
    assert set(SCHEMA_FOR.values()) <= set(validators)
