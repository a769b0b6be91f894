"""Devices of one process share decoding and merging; what each device gets must not change."""

from __future__ import annotations

import pytest

from octosync.chain.json_tree import merge_patch
from octosync.chain.records import StateUpdate
from octosync.errors import DecodeError
from octosync.links.shared_decoding import SharedDecoding
from octosync.wire import chain_link


def payload(sequencer: int) -> bytes:
    update = StateUpdate(sequencer, False, {"players": {"a": {"x": sequencer}}}, {"a": (1,)})
    return chain_link.CODEC.encode(chain_link.ForDevice(3, update))


def test_identical_bytes_are_decoded_once_and_give_the_same_frame() -> None:
    shared = SharedDecoding()
    first = shared.decode(payload(1))
    again = shared.decode(bytes(bytearray(payload(1))))  # equal bytes, another object
    assert again is first
    assert first == chain_link.decode(payload(1))
    other = shared.decode(payload(2))
    assert other != first
    assert shared.decoded == 2


def test_a_bad_frame_raises_every_time_and_is_not_kept() -> None:
    shared = SharedDecoding()
    bad = chain_link.CODEC.encode(chain_link.ForDevice(3, StateUpdate(1, False, {}))).replace(
        b"Sequencer", b"Sequencex"
    )
    for _ in range(2):
        with pytest.raises(DecodeError):
            shared.decode(bad)
    assert shared.decoded == 0


def test_merge_is_shared_only_for_the_same_state_and_patch_objects() -> None:
    shared = SharedDecoding()
    state = {"players": {"a": {"x": 0}, "b": {"x": 5}}}
    patch = {"players": {"a": {"x": 1}, "b": None}}
    result = shared.merge(state, patch)
    assert result == merge_patch(state, patch) == {"players": {"a": {"x": 1}}}
    assert shared.merge(state, patch) is result
    assert shared.merged == 1
    lookalike = {"players": {"a": {"x": 9}}}
    assert shared.merge(lookalike, patch) == {"players": {"a": {"x": 1}}}
    assert shared.merged == 2
    assert state == {"players": {"a": {"x": 0}, "b": {"x": 5}}}, "the input was modified"


def test_entries_are_bounded() -> None:
    shared = SharedDecoding(capacity=2)
    for sequencer in (1, 2, 3):
        shared.decode(payload(sequencer))
    shared.decode(payload(1))  # evicted: decoded again
    assert shared.decoded == 4
