"""Handshake negotiation: the lazily-spec capability fixture and each fail-closed field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given

from octosync.errors import HandshakeFailed
from octosync.ipc.handshake import negotiate
from octosync.ipc.messages import Handshake
from octosync.wire import json as wire_json
from tests.strategies import handshakes


def _scenarios(vectors_dir: Path) -> list[dict[str, Any]]:
    doc = json.loads((vectors_dir / "lazily/codec/capability_handshake.json").read_text())
    assert doc["kind"] == "CapabilityHandshake"
    scenarios: list[dict[str, Any]] = doc["scenarios"]
    return scenarios


def test_capability_handshake_fixture_every_scenario(vectors_dir: Path) -> None:
    scenarios = _scenarios(vectors_dir)
    assert len(scenarios) == 5
    for sc in scenarios:
        # Through the wire decoder, as a face would receive them.
        local = wire_json.decode_handshake(json.dumps(sc["local"]).encode())
        remote = wire_json.decode_handshake(json.dumps(sc["remote"]).encode())
        expected = sc["expected"]
        for a, b in ((local, remote), (remote, local)):
            if expected["compatible"]:
                got = negotiate(a, b)
                assert got.max_frame_size == expected["negotiated_max_frame_size"], sc["id"]
                assert (
                    got.fragmentation_supported == expected["negotiated_fragmentation_supported"]
                ), sc["id"]
                assert got.session_id == a.session_id
            else:
                with pytest.raises(HandshakeFailed) as info:
                    negotiate(a, b)
                assert info.value.path == expected["field"], sc["id"]


BASE = Handshake(
    protocol_id="lazily-ipc",
    protocol_major_version=1,
    codec="json",
    max_frame_size=4096,
    fragmentation_supported=True,
    ordered_reliable=True,
    peer_id=1,
    session_id="scores",
    features=("shared-blob", "publish"),
)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"protocol_id": "lazily-rpc"}, "protocol_id"),
        ({"protocol_major_version": 2}, "protocol_major_version"),
        ({"codec": "msgpack"}, "codec"),
        ({"ordered_reliable": False}, "ordered_reliable"),
        ({"max_frame_size": 0}, "max_frame_size"),
        ({"session_id": "other"}, "session_id"),
        ({"session_id": ""}, "session_id"),
        ({"required_features": ("signaling-relay",)}, "required_features"),
    ],
)
def test_each_incompatibility_fails_closed_naming_the_field(
    change: dict[str, Any], field: str
) -> None:
    remote = msgspec.structs.replace(BASE, peer_id=2, **change)
    for a, b in ((BASE, remote), (remote, BASE)):
        with pytest.raises(HandshakeFailed) as info:
            negotiate(a, b)
        assert info.value.path == field
        assert info.value.name == "HandshakeFailed"


def test_required_feature_offered_by_the_other_side_is_fine() -> None:
    remote = msgspec.structs.replace(
        BASE, peer_id=2, features=("publish",), required_features=("shared-blob",)
    )
    got = negotiate(BASE, remote)
    assert got.features == ("publish",)
    assert (got.local_peer_id, got.remote_peer_id) == (1, 2)


@given(handshakes, handshakes)
def test_negotiation_is_symmetric_and_never_exceeds_either_limit(
    a: Handshake, b: Handshake
) -> None:
    failed_path: str | None = None
    try:
        ab = negotiate(a, b)
    except HandshakeFailed as exc:
        failed_path = exc.path
    if failed_path is not None:
        with pytest.raises(HandshakeFailed) as info:
            negotiate(b, a)
        assert info.value.path == failed_path
        return
    ba = negotiate(b, a)
    assert ab.max_frame_size == ba.max_frame_size == min(a.max_frame_size, b.max_frame_size)
    assert ab.max_frame_size > 0
    assert ab.fragmentation_supported == (a.fragmentation_supported and b.fragmentation_supported)
    assert set(a.required_features) <= set(b.features)
    assert set(b.required_features) <= set(a.features)
    assert a.session_id == b.session_id != ""
