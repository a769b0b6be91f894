"""The shared-document plane on the one commit path: refused up front while the journal cannot
commit (nothing merged), merged only once its commit is back."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from octosync.crdt.op import OpKind, OpRecord
from octosync.crdt.timestamp import Timestamp
from octosync.errors import JournalUnavailable
from octosync.ipc.messages import CrdtOp, CrdtSync, WireStamp
from octosync.server.auth import ANONYMOUS_DEV
from octosync.server.config import ServerConfig
from octosync.server.lazily_state import lazily_state
from octosync.server.plane import Framing
from octosync.server.runtime import Runtime
from octosync.store.journal import GroupCommitWriter
from tests.store.faults import journal_files, need_root, set_immutable

WAIT = 10.0


def _op(peer: int, key: str) -> CrdtOp:
    return CrdtOp(
        slot_id=1, stamp=WireStamp(time.time_ns() // 1_000_000, 0, peer), state=b"1", key=key
    )


async def test_a_write_is_refused_up_front_while_the_journal_cannot_commit(tmp_path: Path) -> None:
    need_root()
    writer = GroupCommitWriter(tmp_path)
    rt = Runtime(ServerConfig(data_dir=tmp_path), writer=writer)
    try:
        plane = lazily_state(rt).plane
        state = plane.core.join(5, "doc", 9, ANONYMOUS_DEV)
        plane.join(5, "doc", Framing("json", lambda sync: b"x"), state)
        plane.receive(5, CrdtSync(ops=(_op(9, "a/lww"),)))
        async with asyncio.timeout(WAIT):  # merged once its commit is back on the loop
            while len(plane.core.streams["doc"].replica) == 0:
                await asyncio.sleep(0.005)
        set_immutable(journal_files(tmp_path), True)
        failing = writer.submit([_record()])
        with pytest.raises(JournalUnavailable):
            await asyncio.wait_for(asyncio.wrap_future(failing), WAIT)
        with pytest.raises(JournalUnavailable):
            plane.receive(5, CrdtSync(ops=(_op(9, "b/lww"),)))
        await asyncio.sleep(0.05)
        assert {op.key for op in plane.core.streams["doc"].replica.ops()} == {"a/lww"}
    finally:
        set_immutable(journal_files(tmp_path), False)
        lazily_state(rt).close()
        writer.close()


def _record() -> OpRecord:
    return OpRecord("m", "k", OpKind.PUT, b"\x01", Timestamp(1, 0, "n"), "n", "n:1")
