"""Shared text benchmark: the Automerge paper's editing trace (259,778 edits, one author) replayed
into one text, and a late joiner receiving the finished text, beside Yjs in the same run.

Reported, each with the load average:

- replay: octosync's text CRDT alone (``crdt/text.py``), the same with its chunk entries
  written per edit as a document writes them (``crdt/text_entries.py``), a plain Python list of
  characters (no CRDT), and Yjs's ``Y.Text`` under Node (npm ``yjs``, installed in a cache
  folder on first use): seconds, and memory held by the finished text (Python: traced
  allocations; Node: heap the finished document frees once dropped, after full GCs);
- octosync.js's text in the same Node process as Yjs: the trace with its chunk entries, and a
  late joiner taking those entries;
- a late joiner: the finished text's entries encoded as the server sends them (JSON
  ``crdt_sync`` frames of 1,000 ops), decoded and merged into a fresh document until its full
  text is there: milliseconds and bytes, beside Yjs's ``encodeStateAsUpdate`` applied to a
  fresh ``Y.Doc``.

Usage::

    python bench/text.py                         # the whole trace
    python bench/text.py --edits 50000           # its first 50,000 edits (a quick look)
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from _harness import NodeUnavailable, node_folder  # noqa: E402
from octosync.crdt.entries import node_of  # noqa: E402
from octosync.crdt.replicated import Replicated  # noqa: E402
from octosync.crdt.shared import SharedState  # noqa: E402
from octosync.crdt.text import TextCrdt  # noqa: E402
from octosync.crdt.text_entries import SharedText  # noqa: E402
from octosync.graph import Context  # noqa: E402
from octosync.ipc.messages import CrdtOp, CrdtSync, WireStamp  # noqa: E402
from octosync.wire import DIALECTS  # noqa: E402

SHARED = Path(os.environ.get("OCTOSYNC_SHARED") or ROOT.parent / "shared")
JS_CLIENT = ROOT / "clients" / "js" / "octosync.js"
FRAME = 1_000

YJS_SCRIPT = r"""
import * as Y from "yjs";
const { TextEntries } = await import(process.argv[4]);
import { readFileSync } from "node:fs";
import { gunzipSync } from "node:zlib";
let trace = JSON.parse(gunzipSync(readFileSync(process.argv[2])));
const limit = Number(process.argv[3]);
const patches = trace.txns.flatMap((t) => t.patches).slice(0, limit);
trace = null;
const t0 = process.hrtime.bigint();
const c0 = process.cpuUsage();
let doc = new Y.Doc();
let text = doc.getText("t");
for (const [pos, del, ins] of patches) {
  if (del) text.delete(pos, del);
  if (ins) text.insert(pos, ins);
}
const replay = Number(process.hrtime.bigint() - t0) / 1e9;
const c1 = process.cpuUsage(c0);
const cpu = (c1.user + c1.system) / 1e6;
const out = text.toString();
const update = Y.encodeStateAsUpdate(doc);
gc();
const held = process.memoryUsage().heapUsed;
doc.destroy();
doc = null;
text = null;
gc();
const heap = held - process.memoryUsage().heapUsed;
const t1 = process.hrtime.bigint();
const late = new Y.Doc();
Y.applyUpdate(late, update);
const joined = late.getText("t").toString();
const join = Number(process.hrtime.bigint() - t1) / 1e6;
const same = joined === out;
const length = out.length;
// octosync.js's text in the same runtime: the trace with its chunk entries, then a joiner
const t2 = process.hrtime.bigint();
const writer = new TextEntries(1);
const entries = new Map();
for (const [pos, del, ins] of patches) {
  if (del) for (const [k, v] of writer.delete(pos, del)) entries.set(k, v);
  if (ins) for (const [k, v] of writer.insert(pos, ins)) entries.set(k, v);
}
const js = Number(process.hrtime.bigint() - t2) / 1e9;
const t3 = process.hrtime.bigint();
const joiner = new TextEntries(2);
for (const [k, v] of [...entries].sort()) joiner.receive(k, JSON.parse(v));
const jsJoin = Number(process.hrtime.bigint() - t3) / 1e6;
const jsSame = joiner.crdt.toString() === out && writer.crdt.toString() === out;
const bytes = update.length;
console.log(JSON.stringify({ replay, cpu, heap, bytes, join, length, same, js, jsJoin, jsSame }));
"""


def patches(path: Path, limit: int) -> tuple[list[tuple[int, int, str]], str]:
    with gzip.open(path) as f:
        trace = json.load(f)
    edits = [tuple(p) for t in trace["txns"] for p in t["patches"]][:limit]
    return edits, trace["endContent"]  # type: ignore[return-value]


def replay_core(edits: list[tuple[int, int, str]]) -> TextCrdt:
    text = TextCrdt(1)
    for pos, deleted, inserted in edits:
        if deleted:
            text.delete(pos, deleted)
        if inserted:
            text.insert(pos, inserted)
    return text


def replay_entries(edits: list[tuple[int, int, str]]) -> tuple[SharedText, dict[str, bytes]]:
    text = SharedText(1)
    text.listening = False
    entries: dict[str, bytes] = {}
    for pos, deleted, inserted in edits:
        writes = (text.delete(pos, deleted) if deleted else []) + (
            text.insert(pos, inserted) if inserted else []
        )
        WIRE[0] += sum(len(state) for _, state in writes)
        entries.update(writes)
    return text, entries


WIRE = [0]
"""State bytes the replay's edits wrote (what each keystroke sends, summed)."""


def replay_document(edits: list[tuple[int, int, str]]) -> str:
    """The trace through ``doc.text`` of a Python document (no socket): stamps, plane entries,
    the graph cell and index-based change events to a listener."""
    doc = Replicated(Context(), SharedState(1, lambda: 1))
    body = doc.text("t")
    events: list[int] = [0]
    body.on_change(lambda e: events.__setitem__(0, events[0] + len(e)))
    for pos, deleted, inserted in edits:
        if deleted:
            body.delete(pos, deleted)
        if inserted:
            body.insert(pos, inserted)
        if len(doc.outgoing) >= FRAME:
            doc.take_outgoing()
    return body.value


def replay_list(edits: list[tuple[int, int, str]]) -> list[str]:
    chars: list[str] = []
    for pos, deleted, inserted in edits:
        if deleted:
            del chars[pos : pos + deleted]
        if inserted:
            chars[pos:pos] = inserted
    return chars


def timed(fn: Any, *args: Any) -> tuple[float, Any]:
    """Wall seconds (CPU seconds of this process go in ``CPU``)."""
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn(*args)
    CPU[fn.__name__] = time.process_time() - c0
    return time.perf_counter() - t0, out


CPU: dict[str, float] = {}


def held_mb(fn: Any, *args: Any) -> float:
    gc.collect()
    tracemalloc.start()
    kept = fn(*args)
    gc.collect()
    size = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del kept
    return size / 1e6


def join_frames(entries: dict[str, bytes]) -> list[bytes]:
    """The finished text as the server sends it to a joiner: JSON frames of 1,000 ops."""
    codec = DIALECTS["json"]
    ops = [
        CrdtOp(node_of("t"), WireStamp(1_800_000_000_000, i, 1), state, key=f"t/{rest}")
        for i, (rest, state) in enumerate(sorted(entries.items()))
    ]
    return [
        codec.encode(CrdtSync(ops=tuple(ops[i : i + FRAME]))) for i in range(0, len(ops), FRAME)
    ]


def late_join(frames: list[bytes]) -> str:
    codec = DIALECTS["json"]
    doc = SharedState(2, lambda: 1)
    for frame in frames:
        sync = codec.decode(frame)
        assert isinstance(sync, CrdtSync)
        doc.receive(sync.ops)
    return str(doc.read("t", "text"))


def yjs(trace: Path, limit: int) -> dict[str, Any] | str:
    try:
        folder = node_folder("text-yjs", ("yjs@13",), {"replay.mjs": YJS_SCRIPT})
    except NodeUnavailable as exc:
        return str(exc)
    done = subprocess.run(
        ["node", "--expose-gc", "replay.mjs", str(trace), str(limit), JS_CLIENT.as_uri()],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        return done.stderr.strip().splitlines()[-1]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, default=SHARED / "traces" / "automerge-paper.json.gz")
    ap.add_argument("--edits", type=int, default=10**9, help="replay only the first N edits")
    args = ap.parse_args()
    edits, end = patches(args.trace, args.edits)
    print(f"trace {args.trace.name}: {len(edits):,} edits; load {os.getloadavg()[0]:.2f}")

    t_core, core = timed(replay_core, edits)
    t_entries, (shared, entries) = timed(replay_entries, edits)
    t_doc, body = timed(replay_document, edits)
    t_list, chars = timed(replay_list, edits)
    assert core.to_string() == str(shared) == body == "".join(chars)
    if len(edits) == 259_778:
        assert core.to_string() == end
    text = core.to_string()
    mb_core = held_mb(replay_core, edits)
    mb_list = held_mb(replay_list, edits)
    rows = [
        ("octosync text CRDT (crdt/text.py)", t_core, "replay_core", f"{mb_core:6.1f} MB held"),
        (
            "with its chunk entries per edit",
            t_entries,
            "replay_entries",
            f"{len(entries):,} entries",
        ),
        ("a document's doc.text (Replicated)", t_doc, "replay_document", "change events on"),
        ("plain Python list of chars", t_list, "replay_list", f"{mb_list:6.1f} MB held"),
    ]
    for label, wall, fn, note in rows:
        print(f"replay, {label:36} {wall:6.2f} s ({CPU[fn]:5.2f} s CPU)  {note}")
    print(
        f"  ({core.spans():,} spans hold {len(text):,} characters; a keystroke writes"
        f" {WIRE[0] / len(edits):.0f} bytes of entry state on average)"
    )

    frames = join_frames(entries)
    wire = sum(len(f) for f in frames)
    t_join, joined = timed(late_join, frames)
    assert joined == text
    print(
        f"late joiner, octosync: {t_join * 1000:7.1f} ms ({CPU['late_join'] * 1000:.0f} ms CPU)"
        f" to its full text, {wire:,} bytes "
        f"in {len(frames)} frames ({sum(len(s) for s in entries.values()):,} bytes of state)"
    )

    y = yjs(args.trace, len(edits))
    print(f"load {os.getloadavg()[0]:.2f}")
    if isinstance(y, str):
        print(f"Yjs not run: {y}")
        return
    assert y["same"]
    assert y["length"] == len(text)
    print(
        f"replay, {'Yjs Y.Text (Node)':36} {y['replay']:6.2f} s ({y['cpu']:5.2f} s CPU)"
        f"  {y['heap'] / 1e6:6.1f} MB heap"
    )
    print(f"late joiner, Yjs: {y['join']:7.1f} ms to its full text, {y['bytes']:,} bytes of update")
    assert y["jsSame"]
    print(
        f"octosync.js in the same Node: the trace with its entries {y['js']:.2f} s,"
        f" a late joiner {y['jsJoin']:.0f} ms"
    )
    print(
        f"ratios to Yjs: replay {t_core / y['replay']:.2f}x"
        f" (CPU {CPU['replay_core'] / y['cpu']:.2f}x),"
        f" doc.text {t_doc / y['replay']:.2f}x (CPU {CPU['replay_document'] / y['cpu']:.2f}x);"
        f" a plain list {t_list / y['replay']:.2f}x; join {t_join * 1000 / y['join']:.2f}x,"
        f" bytes {wire / y['bytes']:.2f}x"
    )


if __name__ == "__main__":
    main()
