"""The storage rules, in order, each refusing with a typed error that names what is wrong.

The disk rule is asked with an injected probe (any free space, any threshold) and against a
real small disk (a tmpfs) filled until under 1% is free; ``tests/e2e/test_storage_rules.py``
shows every face refusing through it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.errors import ConfigError, Overloaded, StorageError
from octosync.server.config import ServerConfig, parse_config
from octosync.store.commit_path import WRITE, Ask
from octosync.store.journal import GroupCommitWriter
from octosync.store.storage_rules import (
    DiskFree,
    JournalWritable,
    QueueRoom,
    StorageSettings,
    free_percent,
    rules_for,
)
from tests.store.faults import fill, small_disk

HERE = Path("/data")


@given(
    free=st.floats(0, 100, allow_nan=False),
    floor=st.floats(0, 50, allow_nan=False),
    then=st.sampled_from(["", "resend later"]),
)
def test_the_disk_rule_refuses_exactly_below_its_floor(
    free: float, floor: float, then: str
) -> None:
    rule = DiskFree(HERE, floor, probe=lambda path: free)
    if floor > 0 and free < floor:
        with pytest.raises(Overloaded) as caught:
            rule.check(Ask(Overloaded, then))
        assert caught.value.path == str(HERE)
        assert f"{floor:g}% kept free" in caught.value.message
        assert caught.value.message.endswith(then)
    else:
        rule.check(Ask(Overloaded, then))


def test_a_folder_that_cannot_be_asked_is_left_to_the_journal() -> None:
    def gone(path: Path) -> float:
        raise FileNotFoundError(path)

    DiskFree(HERE, 1.0, probe=gone).check(WRITE)


def test_the_rules_come_in_order_journal_queue_disk(tmp_path: Path) -> None:
    with GroupCommitWriter(tmp_path) as writer:
        rules = rules_for(writer, tmp_path, StorageSettings())
    assert [type(r) for r in rules] == [JournalWritable, QueueRoom, DiskFree]
    disk = rules[2]
    assert isinstance(disk, DiskFree)
    assert (disk.data_dir, disk.min_percent) == (tmp_path, 1.0)


def _leave_free(disk: Path, percent: float) -> Path:
    """Fill ``disk``, then give back space until ``percent`` of it is free (to the block)."""
    filler = fill(disk)
    fs = os.statvfs(disk)
    want = int(fs.f_blocks * fs.f_frsize * percent / 100)
    os.truncate(filler, max(filler.stat().st_size - want, 0))
    return filler


def test_a_nearly_full_disk_is_refused_and_accepted_again_once_space_returns(
    tmp_path: Path,
) -> None:
    with small_disk(tmp_path / "disk", 8) as disk:
        rule = DiskFree(disk, 1.0)
        rule.check(WRITE)
        filler = _leave_free(disk, 0.5)
        assert 0 < free_percent(disk) < 1.0
        with pytest.raises(StorageError) as caught:
            rule.check(Ask(then="resend later"))
        assert caught.value.path == str(disk)
        filler.unlink()
        rule.check(WRITE)


def test_the_floor_is_a_storage_setting_with_a_range() -> None:
    cfg = parse_config({"storage": {"min_free_disk_percent": 5}}, Path("x.toml"), ServerConfig())
    assert cfg.storage.min_free_disk_percent == 5
    assert ServerConfig().storage.min_free_disk_percent == 1.0
    with pytest.raises(ConfigError) as caught:
        parse_config({"storage": {"min_free_disk_percent": 51}}, Path("x.toml"), ServerConfig())
    assert caught.value.path == "storage.min_free_disk_percent"
    assert "out of range" in caught.value.message
