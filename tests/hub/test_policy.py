from __future__ import annotations

import pytest

from octosync import errors
from octosync.hub import ERROR_POLICY, closes_connection


@pytest.mark.parametrize(
    ("error", "stream", "closes"),
    [
        (errors.HandshakeFailed("x"), False, True),
        (errors.Unauthorized("x"), False, True),
        (errors.Oversize("x"), False, True),
        (errors.DecodeError("x"), False, False),
        (errors.DecodeError("x"), True, True),
        (errors.Forbidden("x"), True, False),
        (errors.ForbiddenPublish("x"), True, False),
        (errors.SnapshotRequired("x"), False, False),
        (errors.EpochGap("x"), False, False),
        (errors.Desync("x"), False, False),
        (errors.StorageError("x"), False, True),
        (errors.LimitExceeded("x"), True, False),
        (errors.RemoteProtocolError("x"), True, False),
        (errors.ShuttingDown("x"), False, True),
        (errors.Overloaded("x"), False, True),
        (errors.InternalError("x"), False, True),
    ],
)
def test_table(error: errors.OctosyncError, stream: bool, closes: bool) -> None:
    assert closes_connection(error, byte_stream=stream) is closes


def test_every_entry_is_a_named_error_and_the_table_is_documented() -> None:
    from octosync.hub import policy

    assert policy.__doc__ is not None
    for cls in ERROR_POLICY:
        assert cls in errors.all_errors()
        assert cls.name in policy.__doc__


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (errors.Oversize("x"), 1009),
        (errors.Unauthorized("x"), 1008),
        (errors.Forbidden("x"), 1008),
        (errors.HandshakeFailed("x"), 1008),
        (errors.DecodeError("x"), 1002),
        (errors.ShuttingDown("x"), 1001),
        (errors.Overloaded("x"), 1013),
        (errors.InternalError("x"), 1011),
        (errors.StorageError("x"), 1011),
    ],
)
def test_close_codes(error: errors.OctosyncError, code: int) -> None:
    from octosync.hub.policy import close_code

    assert close_code(error) == code
