from __future__ import annotations

import logging

import pytest

from octosync.server.throttled_log import ThrottledLog


def test_once_per_interval_with_the_count_of_what_was_held_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    log = ThrottledLog(logging.getLogger("t"), interval=10.0, clock=lambda: now[0])
    with caplog.at_level(logging.ERROR, logger="t"):
        assert log.exception("accept failed", OSError(24, "Too many open files"))
        for _ in range(500):
            assert not log.exception("accept failed")
        assert log.exception("another problem")
        now[0] = 10.0
        assert log.exception("accept failed")
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "accept failed",
        "another problem",
        "accept failed (500 more since the last report)",
    ]
    assert caplog.records[0].exc_info is not None
