"""Three replicas race over 1,000 effects while the lease holder is ``kill -9``ed twice:
every effect fires exactly once (the lease fences, the journal's records remember, the
target is asked about the ones a killed holder left in doubt)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from octosync.effects.ledger import State
from octosync.store.effects import JournalEffects
from tests.conftest import ROOT

COUNT = 1000
WORKER = ROOT / "tests" / "e2e" / "effect_worker.py"


def _wait(predicate: object, what: str, timeout: float = 120.0) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


@pytest.mark.slow
def test_every_effect_fires_exactly_once_across_two_kills(tmp_path: Path) -> None:
    data, sink = tmp_path / "data", tmp_path / "sink"
    sink.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    workers = {
        f"w{i}": subprocess.Popen(
            [sys.executable, str(WORKER), str(data), str(sink), f"w{i}", str(COUNT)], env=env
        )
        for i in range(3)
    }
    store = JournalEffects(data)
    killed: list[str] = []
    try:
        for threshold in (COUNT // 4, COUNT // 2):
            _wait(lambda t=threshold: store.count(State.DONE) >= t, f"{threshold} effects")
            lease = store.lease()
            assert lease is not None
            victim = workers[lease.holder]
            assert victim.poll() is None
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            killed.append(lease.holder)
            # someone else takes over before the next kill
            _wait(
                lambda gone=lease.holder: (now := store.lease()) is not None and now.holder != gone,
                "a new holder",
            )
        _wait(lambda: store.count(State.DONE) == COUNT, "every effect done")
        survivor = next(w for name, w in workers.items() if name not in killed)
        assert survivor.wait(60) == 0
    finally:
        for w in workers.values():
            if w.poll() is None:
                w.kill()
                w.wait()
        store.close()
    fired = [line.split() for line in (sink / "log").read_text().splitlines()]
    keys = [key for key, _token in fired]
    assert len(killed) == 2
    assert sorted(keys) == sorted(f"e{i}" for i in range(COUNT))  # each exactly once
    tokens = [int(token) for _key, token in fired]
    assert tokens == sorted(tokens)  # the target never accepted a stale holder's call
    assert len(set(tokens)) >= 3  # three terms fired: before, between and after the kills
