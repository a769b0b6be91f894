from __future__ import annotations

import pytest

from octosync import errors


def test_names_and_codes_are_unique() -> None:
    classes = errors.all_errors()
    names = [c.name for c in classes]
    codes = [c.code for c in classes]
    assert len(set(names)) == len(names)
    assert len(set(codes)) == len(codes)
    assert all(c.__dict__.get("name") == c.name for c in classes), "every class sets its own name"


def test_protocol_names_from_the_seeds_are_present() -> None:
    for name in ("EpochGap", "ForbiddenPublish", "SnapshotRequired", "Oversize", "DecodeError"):
        cls = errors.by_name(name)
        assert issubclass(cls, errors.RemoteProtocolError)


def test_path_is_part_of_the_message() -> None:
    err = errors.DecodeError("expected int, got str", path="$.ops[2].slot_id")
    assert str(err) == "$.ops[2].slot_id: expected int, got str"
    assert err.path == "$.ops[2].slot_id"


def test_unknown_name_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        errors.by_name("NoSuchError")
