"""Octoprotocol records as MsgPack (links, devices) and JSON (browsers, tools), decoded strictly.

One ``ChainCodec`` per (message type, dialect). Decoding checks the schema (``DecodeError``
naming the field) and then that every ``State``/``Change`` is a JSON tree, which MsgPack alone
does not promise (binary values, non-string keys). Link frames wrap a message with the
configuration epoch, so a receiver can fence an older configuration before looking inside.
"""

from __future__ import annotations

from types import UnionType
from typing import Annotated, Any, Generic, Literal, TypeVar, Union, get_args, get_origin

import msgspec

from octosync.chain.json_tree import check_json
from octosync.chain.records import ChainRecord, ChainStateMachine, DeviceStateMachine
from octosync.wire.strict import Buffer, strict

T = TypeVar("T")
Dialect = Literal["msgpack", "json"]
JSON_FIELDS = ("state", "change")


class ChainCodec(Generic[T]):
    def __init__(self, message_type: Any, dialect: Dialect) -> None:
        self.dialect = dialect
        self.label = f"chain/{dialect}"
        if dialect == "msgpack":
            self._encode = msgspec.msgpack.Encoder().encode
            self._decode = msgspec.msgpack.Decoder(message_type).decode
        else:
            self._encode = msgspec.json.Encoder().encode
            self._decode = msgspec.json.Decoder(message_type).decode

    def encode(self, message: T) -> bytes:
        return self._encode(message)

    def decode(self, data: Buffer) -> T:
        message: T = strict(self._decode, data, dialect=self.label)
        check_records(message)
        return message


def check_records(value: object, path: str = "$") -> None:
    """Every JSON-tree field of ``value`` (and of structs nested in it) holds a JSON tree."""
    if not isinstance(value, msgspec.Struct):
        return
    for name, encode_name, is_json in _plan(type(value)):
        item = getattr(value, name)
        where = f"{path}.{encode_name}"
        if is_json:
            check_json(item, where)
        elif isinstance(item, msgspec.Struct):
            check_records(item, where)


_PLANS: dict[type, list[tuple[str, str, bool]]] = {}


def _plan(cls: type[msgspec.Struct]) -> list[tuple[str, str, bool]]:
    """Per struct type, once: the fields to look into, as (field, wire name, holds a JSON
    tree); fields that can hold neither a JSON tree nor a struct are left out, so an event's
    frame (epoch, sequencers, strings) costs one lookup. ``fields()`` is slow."""
    plan = _PLANS.get(cls)
    if plan is None:
        is_record = issubclass(cls, ChainRecord)
        plan = []
        for f in msgspec.structs.fields(cls):
            is_json = is_record and f.name in JSON_FIELDS
            if is_json or _may_be_struct(f.type):
                plan.append((f.name, f.encode_name, is_json))
        _PLANS[cls] = plan
    return plan


def _may_be_struct(annotation: Any) -> bool:
    """Whether a field's value itself (not an item inside it) can be a struct."""
    if isinstance(annotation, type):
        return issubclass(annotation, msgspec.Struct)
    origin = get_origin(annotation)
    if origin is Annotated:
        return _may_be_struct(get_args(annotation)[0])
    if origin is Union or origin is UnionType:
        return any(_may_be_struct(arg) for arg in get_args(annotation))
    return origin is None  # unknown (a type variable, Any): look


MACHINE_MSGPACK: ChainCodec[ChainStateMachine] = ChainCodec(ChainStateMachine, "msgpack")
DEVICE_MACHINE_MSGPACK: ChainCodec[DeviceStateMachine] = ChainCodec(DeviceStateMachine, "msgpack")


class ErrorRecord(msgspec.Struct, frozen=True, rename="pascal"):
    """What a browser device gets before its ``/chain/NAME`` connection closes."""

    type: str
    code: str
    message: str


_json = msgspec.json.Encoder()


def encode_error_record(code: str, message: str) -> bytes:
    """``{"Type": "Error", "Code": ..., "Message": ...}``, the seed's JSON for an error."""
    return _json.encode(ErrorRecord("Error", code, message))
