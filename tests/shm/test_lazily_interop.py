"""Shared-memory blobs both ways with lazily-py's ``ShmBackend`` (a real peer, Python 3.12+):
regions and descriptors one side writes, the other reads and checks."""

from __future__ import annotations

import json
import subprocess

import pytest

from octosync.errors import BlobInvalid
from octosync.ipc.messages import BlobRef
from octosync.shm.region import SharedRegion, fresh_name
from tests.lazily_peer import require_lazily_python, run_lazily

pytestmark = pytest.mark.peer

PAYLOAD = bytes(range(256)) * 40 + b"tail"

LAZILY_WRITES = """
import json, sys
from lazily.transport import ShmBackend
backend = ShmBackend.create(sys.argv[1] if len(sys.argv) > 1 else NAME, 1 << 16)
backend.write(b"first blob, to move the cursor")
ref = backend.write(bytes.fromhex(HEX))
print(json.dumps({"offset": ref.offset, "len": ref.len, "generation": ref.generation,
                  "epoch": ref.epoch, "checksum": ref.checksum}), flush=True)
sys.stdin.readline()  # keep the region until octosync has read it
backend.close(); backend.unlink()
"""

LAZILY_READS = """
import json, sys
from lazily.ipc import ShmBlobRef
from lazily.transport import ShmBackend
d = json.loads(sys.stdin.readline())
backend = ShmBackend.open(NAME)
view = backend.read_view(ShmBlobRef(**d))
print("none" if view is None else bytes(view).hex())
bad = ShmBlobRef(**{**d, "generation": d["generation"] + 1})
print("none" if backend.read_view(bad) is None else "read")
view = None
backend.close()
"""


def test_octosync_reads_what_lazily_py_wrote() -> None:
    name = fresh_name("lazily")
    script = LAZILY_WRITES.replace("NAME", repr(name)).replace("HEX", repr(PAYLOAD.hex()))
    python = require_lazily_python()
    peer = subprocess.Popen(
        [str(python), "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert peer.stdout is not None
        assert peer.stdin is not None
        ref = BlobRef(**json.loads(peer.stdout.readline()))
        with SharedRegion.open(name) as region:
            assert region.read(ref) == PAYLOAD
            with pytest.raises(BlobInvalid) as info:
                region.read(
                    BlobRef(ref.offset, ref.len, ref.generation - 1, ref.epoch, ref.checksum)
                )
            assert info.value.path == "generation"
        peer.stdin.write("done\n")
        peer.stdin.flush()
        assert peer.wait(30) == 0
    finally:
        if peer.poll() is None:
            peer.kill()


def test_lazily_py_reads_what_octosync_wrote() -> None:
    with SharedRegion.create(fresh_name("octo"), 1 << 16) as region:
        region.write(0, b"first blob, to move the cursor")
        ref = region.write(0, PAYLOAD)
        d = {k: getattr(ref, k) for k in ("offset", "len", "generation", "epoch", "checksum")}
        out = run_lazily(LAZILY_READS.replace("NAME", repr(region.name)), json.dumps(d) + "\n")
    got, stale = out.split()
    assert bytes.fromhex(got) == PAYLOAD
    assert stale == "none"  # lazily-py refuses a descriptor whose generation is not the header's
