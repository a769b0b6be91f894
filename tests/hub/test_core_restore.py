"""Hub.restore: state rebuilt from the journal, served to late joiners, owned by no one."""

from __future__ import annotations

import pytest

from octosync.errors import SnapshotRequired
from octosync.hub import Hub, HubConfig, ViewKey
from octosync.hub.model import DiffFrame, SnapshotFrame
from tests.hub.helpers import RefSubscriber, cell_set, json_encoder, snap


def hub() -> Hub:
    return Hub(
        HubConfig(retain_after_producer_leaves=1.0),
        clock=lambda: 100.0,
        encoders={"j": json_encoder},
    )


def test_a_restored_stream_serves_late_joiners_and_never_expires() -> None:
    h = hub()
    h.restore("s", [SnapshotFrame(3, snap(3, {1: b"a"}))])
    assert h.producer_of("s") is None
    assert h.expire() == []
    h.connect(1, ViewKey("lazily", "j"))
    h.subscribe(1, "s")
    sub = RefSubscriber()
    sub.feed(h.take(1))
    assert (sub.epoch, sub.values) == (3, {1: b"a"})


def test_restore_folds_diffs_and_refuses_what_publish_would() -> None:
    h = hub()
    base = snap(0, {1: b"a"})
    h.restore("g", [SnapshotFrame(0, base), DiffFrame(0, 1, cell_set(0, 1, b"b"))])
    assert h.epoch_of("g") == 1
    with pytest.raises(ValueError, match="already has a state"):
        h.restore("g", [SnapshotFrame(0, base)])
    with pytest.raises(SnapshotRequired):
        h.restore("x", [DiffFrame(0, 1, cell_set(0, 1, b"b"))])
    h.restore("empty", [])
    assert "empty" not in h.stream_ids()
