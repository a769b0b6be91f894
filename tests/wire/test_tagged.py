"""The tagged dialects' envelope names every message of the state plane, and nothing else."""

from __future__ import annotations

from typing import get_args

from octosync.ipc.messages import IpcMessage
from octosync.wire import json_tagged
from octosync.wire.tagged import ENVELOPE_TAGS


def test_the_envelope_has_one_key_per_message_of_the_union() -> None:
    assert sorted(ENVELOPE_TAGS) == sorted(t.__name__ for t in get_args(IpcMessage))


def test_every_message_is_sniffed_as_tagged_and_the_seed_shape_is_not() -> None:
    for name in ENVELOPE_TAGS:
        assert json_tagged.looks_tagged(b' { "%s": {}}' % name.encode())
    assert not json_tagged.looks_tagged(b'{"type": "snapshot", "epoch": 1}')
    assert not json_tagged.looks_tagged(b'{"Unknown": {}}')
