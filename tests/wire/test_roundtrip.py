"""Every dialect round-trips every message it can express; the tagged ones agree with each
other, and their lossy corners (ResyncRequest's reason, NodeAdd spellings) are exactly those."""

from __future__ import annotations

from types import ModuleType

import pytest
from hypothesis import given

from octosync.ipc.messages import Delta, Handshake, IpcMessage, NodeAdd, ResyncRequest
from octosync.wire import json as seed_json
from octosync.wire import json_tagged, msgpack
from tests.strategies import handshakes, ipc_messages

TAGGED = [json_tagged, msgpack]


@pytest.mark.parametrize("mod", TAGGED, ids=lambda m: m.__name__)
@given(message=ipc_messages(tagged=True))
def test_tagged_dialects_round_trip(mod: ModuleType, message: IpcMessage) -> None:
    raw = mod.encode(message)
    assert mod.decode(raw) == message
    assert mod.encode(mod.decode(raw)) == raw


@given(ipc_messages())
def test_all_dialects_agree_after_one_tagged_pass(message: IpcMessage) -> None:
    canonical = json_tagged.decode(json_tagged.encode(message))
    assert msgpack.decode(msgpack.encode(message)) == canonical
    assert seed_json.decode(seed_json.encode(canonical)) == canonical


@pytest.mark.parametrize("mod", [seed_json, *TAGGED], ids=lambda m: m.__name__)
@given(handshake=handshakes)
def test_handshakes_round_trip(mod: ModuleType, handshake: Handshake) -> None:
    assert mod.decode_handshake(mod.encode_handshake(handshake)) == handshake


def test_tagged_resync_request_keeps_only_the_epoch() -> None:
    for mod in TAGGED:
        assert mod.decode(mod.encode(ResyncRequest(7, "EpochGap"))) == ResyncRequest(7)
        assert mod.decode(mod.encode(ResyncRequest())) == ResyncRequest(0)


@pytest.mark.parametrize(
    ("written", "read"),
    [
        (NodeAdd(1, "i32", b"\x01", None, "resolved"), NodeAdd(1, "i32", b"\x01")),
        (NodeAdd(1, "i32", None, None, "unset"), NodeAdd(1, "i32")),
        (NodeAdd(1, "i32", None, None, "dirty"), NodeAdd(1, "i32", None, None, "dirty")),
        (NodeAdd(1, "i32", None, "a/b", "opaque"), NodeAdd(1, "i32", None, "a/b", "opaque")),
    ],
)
def test_tagged_node_add_state_spelling(written: NodeAdd, read: NodeAdd) -> None:
    for mod in TAGGED:
        got = mod.decode(mod.encode(Delta(0, 1, (written,))))
        assert got == Delta(0, 1, (read,))


def test_dialects_by_name() -> None:
    from octosync.errors import LocalProtocolError
    from octosync.wire import dialect

    assert dialect("json") is seed_json
    assert dialect("json_tagged") is json_tagged
    assert dialect("msgpack") is msgpack
    with pytest.raises(LocalProtocolError) as info:
        dialect("bincode")
    assert info.value.path == "codec"
