"""Device and link persistence: one transaction per save, a SIGKILL leaves the last commit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from octosync.chain.link import ChainLink
from octosync.chain.records import (
    ChainStateMachine,
    DeviceEvent,
    DeviceStateMachine,
    Event,
    StateChange,
)
from octosync.store.chain import DeviceStore, LinkStore


def commits_until_sigkill(script: str, args: list[str], count: int) -> int:
    """Run the writer ``script`` beside this file, which prints each commit's number once it
    is committed; SIGKILL it once it has printed ``count`` (or ended) and return the last
    number printed."""
    path = Path(__file__).with_name(script)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    proc = subprocess.Popen(
        [sys.executable, str(path), *args], stdout=subprocess.PIPE, text=True, env=env
    )
    committed = 0
    assert proc.stdout is not None
    try:
        for line in proc.stdout:  # bounded: killed after ``count`` commits
            committed = int(line)
            if committed >= count:
                break
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    return committed


def test_device_machine_round_trips(tmp_path: Path) -> None:
    store = DeviceStore(tmp_path / "d.sqlite")
    assert store.load() == DeviceStateMachine()
    machine = DeviceStateMachine(
        {1: DeviceEvent(1, "a", "x"), 4: DeviceEvent(4, "b", "y")}, 5, {"k": [1, None]}, 3
    )
    store.save(machine)
    store.close()
    assert DeviceStore(tmp_path / "d.sqlite").load() == machine


@settings(max_examples=25)
@given(st.lists(st.sets(st.integers(1, 12)), min_size=1, max_size=6))
def test_saves_write_the_difference(histories: list[set[int]]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        store = DeviceStore(Path(tmp) / "d.sqlite")
        for i, keys in enumerate(histories):
            machine = DeviceStateMachine(
                {k: DeviceEvent(k, "e", str(k)) for k in keys}, 13 + i, {"i": i}, i
            )
            store.save(machine)
            assert store.load() == machine
        store.close()


def test_device_sigkill_leaves_the_last_committed_machine(tmp_path: Path) -> None:
    path = tmp_path / "device.sqlite"
    committed = commits_until_sigkill("_chain_device_writer.py", [str(path)], 200)
    machine = DeviceStore(path).load()
    last = machine.next_device_sequencer - 1
    assert last >= committed
    assert machine.state == {"n": last}
    for d, event in machine.events.items():
        assert d <= last
        assert event.payload == f"payload-{d}"
    expected_live = {d for d in range(1, last + 1) if d % 3 != 1 or d + 2 > last}
    assert set(machine.events) == expected_live


@pytest.mark.parametrize("durability", ["full", "normal"])
def test_link_sigkill_loses_nothing_committed_in_either_durability(
    tmp_path: Path, durability: str
) -> None:
    """``normal`` skips the fsync per commit: a power loss may cost the last commits, a crash
    of the process (what the chain's failover handles) costs nothing committed."""
    path = tmp_path / "link.sqlite"
    committed = commits_until_sigkill("_chain_link_writer.py", [str(path), durability], 300)
    machine, epoch = LinkStore(path).load()
    assert epoch == 1
    held = sorted(machine.events)
    assert held[-1] >= committed
    assert held == list(range(1, held[-1] + 1))
    assert machine.events[committed].payload == f"payload-{committed}"


def test_link_replica_round_trips_after_activity(tmp_path: Path) -> None:
    store = LinkStore(tmp_path / "link.sqlite")
    link = ChainLink()
    for d in range(1, 6):
        link.receive_device_event("a", DeviceEvent(d, "x", str(d)))
        store.commit(link, epoch=3)
    link.apply_state_change(StateChange(change={"s": 1}, event_kill=(1, 2, 4), sequencer=1))
    assert store.commit(link, epoch=4)
    assert not store.commit(link, epoch=4)
    store.close()
    machine, epoch = LinkStore(tmp_path / "link.sqlite").load()
    assert epoch == 4
    assert machine == link.machine()
    assert sorted(machine.events) == [3, 4, 5]


def test_link_replace_overwrites(tmp_path: Path) -> None:
    store = LinkStore(tmp_path / "link.sqlite")
    link = ChainLink()
    link.receive_device_event("a", DeviceEvent(1, "x", ""))
    store.commit(link, 1)
    copy = ChainStateMachine({7: Event("b", 2, 7, "y", "", True)}, {"b": 1}, 8, 7, [1], 5, 7)
    store.replace(copy, 2)
    assert store.load() == (copy, 2)
