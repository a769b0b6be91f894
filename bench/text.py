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
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from _harness import NodeUnavailable, cpu_seconds, node_folder  # noqa: E402
from octosync.crdt import text_collect  # noqa: E402
from octosync.crdt.entries import node_of  # noqa: E402
from octosync.crdt.plane import stamp_key  # noqa: E402
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
let join = Infinity;
let joined = "";
for (let i = 0; i < 5; i += 1) {
  const t1 = process.hrtime.bigint();
  const late = new Y.Doc();
  Y.applyUpdate(late, update);
  joined = late.getText("t").toString();
  join = Math.min(join, Number(process.hrtime.bigint() - t1) / 1e6);
  late.destroy();
}
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


def join_ops(entries: dict[str, bytes]) -> list[CrdtOp]:
    """The finished text's entries as a server's replica holds them, in key order."""
    return [
        CrdtOp(node_of("t"), WireStamp(1_800_000_000_000, i, 1), state, key=f"t/{rest}")
        for i, (rest, state) in enumerate(sorted(entries.items()))
    ]


def compact_all(ops: list[CrdtOp]) -> list[CrdtOp]:
    """The entries once the server collected every tombstone it may (one writer, who has
    seen everything: the watermark is its latest stamp), passes repeated until none goes."""
    held = {op.key: op for op in ops}
    mark = {1: max(stamp_key(op.stamp) for op in ops)}
    after = None
    PASSES.clear()
    while True:
        t0 = time.perf_counter()
        rewrites = text_collect.compact("t", list(held.values()), mark, after, 1_900_000_000_000)
        PASSES.append(time.perf_counter() - t0)
        if not rewrites:
            return sorted(held.values(), key=lambda op: op.key or "")
        for op in rewrites:
            held[op.key] = op
        after = rewrites[-1].stamp


PASSES: list[float] = []
"""Seconds each of the server's collection passes took."""


def _runs(op: CrdtOp) -> list[list[Any]]:
    runs: list[list[Any]] = json.loads(op.state) if isinstance(op.state, bytes) else []
    return runs


def join_frames(ops: list[CrdtOp]) -> list[bytes]:
    """What the server sends a joiner: JSON ``crdt_sync`` frames of 1,000 ops."""
    codec = DIALECTS["json"]
    return [
        codec.encode(CrdtSync(ops=tuple(ops[i : i + FRAME]))) for i in range(0, len(ops), FRAME)
    ]


def late_join(frames: list[bytes]) -> str:
    codec = DIALECTS["json"]
    doc = SharedState(2, lambda: 1)
    doc.text_of("t").listening = True  # as a client showing the text: its change events kept
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


# --- keystrokes through a server to readers, beside Hocuspocus ---------------------------------

SERVE_SCRIPT = r"""
// usage: node serve.mjs SYSTEM URL TRACE DOCS READERS EVERY_MS SECONDS [OCTOSYNC_JS]
// Each of DOCS writers types the trace's first edits (a keystroke: one patch) into its own
// document every EVERY_MS; READERS readers per document record when their text first equals
// the writer's after each keystroke. Prints the latency to the last reader per keystroke.
import WebSocket from "ws";
import { readFileSync } from "node:fs";
import { gunzipSync } from "node:zlib";
const [system, url, tracePath, docsS, readersS, everyS, secondsS, module] = process.argv.slice(2);
const [docs, readers, every, seconds] = [docsS, readersS, everyS, secondsS].map(Number);
const strokes = Math.floor((seconds * 1000) / every);
const trace = JSON.parse(gunzipSync(readFileSync(tracePath)));
const patches = trace.txns.flatMap((t) => t.patches).slice(0, strokes);
const history = [""]; // the text after each keystroke
for (const [pos, del, ins] of patches) {
  const s = history[history.length - 1];
  history.push(s.slice(0, pos) + ins + s.slice(pos + del));
}
const now = () => performance.now();
const typed = Array.from({ length: docs }, () => new Float64Array(strokes + 1));
// when the last reader saw each keystroke
const last = Array.from({ length: docs }, () => new Float64Array(strokes + 1));
const seen = Array.from({ length: docs }, () => new Int32Array(strokes + 1)); // readers that saw it
const closers = [];

function observed(d, at, text) {
  // the smallest keystroke after `at` whose text this is (monotonic: one writer, in order)
  let j = at.k + 1;
  const upto = Math.min(strokes, typedCount[d]);
  while (j <= upto && history[j] !== text) j += 1;
  if (j > upto) return;
  const t = now();
  for (let k = at.k + 1; k <= j; k += 1) {
    seen[d][k] += 1;
    if (t > last[d][k]) last[d][k] = t;
  }
  at.k = j;
}
const typedCount = new Int32Array(docs);

let open;
let writerOf;
if (system === "octosync") {
  const { connect } = await import(module);
  open = async (name) => {
    const client = connect(url, { WebSocket });
    closers.push(() => client.close());
    const doc = client.openDocument(name);
    await doc.synced();
    return doc.text("t");
  };
} else {
  const { HocuspocusProvider } = await import("@hocuspocus/provider");
  const Y = await import("yjs");
  open = (name) => new Promise((resolve) => {
    const document = new Y.Doc();
    const provider = new HocuspocusProvider({ url, name, document, WebSocketPolyfill: WebSocket });
    closers.push(() => provider.destroy());
    provider.on("synced", () => resolve(document.getText("t")));
  });
}
writerOf = (text) => ({
  insert: (i, s) => text.insert(i, s),
  delete: (i, n) => text.delete(i, n),
});

const writers = [];
const stamp = Date.now();
for (let d = 0; d < docs; d += 1) {
  const name = `keys-${d}-${stamp}`;
  writers.push(writerOf(await open(name)));
  for (let r = 0; r < readers; r += 1) {
    const text = await open(name);
    const at = { k: 0 };
    const look = () => observed(d, at, text.toString());
    if (system === "octosync") text.on("change", look);
    else text.observe(look);
  }
}
const start = now() + 200;
let k0 = 0;
await new Promise((done) => {
  const tick = () => {
    const t = now();
    const k = Math.min(strokes, Math.floor((t - start) / every) + 1);
    for (; k0 < k; k0 += 1) {
      const [pos, del, ins] = patches[k0];
      for (let d = 0; d < docs; d += 1) {
        const w = writers[d];
        if (del) w.delete(pos, del);
        if (ins) w.insert(pos, ins);
        typed[d][k0 + 1] = now();
        typedCount[d] = k0 + 1;
      }
    }
    if (k0 >= strokes) done();
    else setTimeout(tick, Math.max(0, start + k0 * every - now()));
  };
  setTimeout(tick, 200);
});
const typedFor = (now() - start) / 1000;
await new Promise((r) => setTimeout(r, 2000)); // what is in flight arrives
const lat = [];
let missing = 0;
for (let d = 0; d < docs; d += 1) {
  for (let k = 1; k <= strokes; k += 1) {
    if (seen[d][k] < readers) missing += 1;
    else lat.push(last[d][k] - typed[d][k]);
  }
}
lat.sort((a, b) => a - b);
const q = (p) => lat[Math.min(lat.length - 1, Math.floor(p * lat.length))];
const max = lat[lat.length - 1];
const used = process.cpuUsage();
const clientCpu = (used.user + used.system) / 1e6;
const out = { strokes: strokes * docs, typedFor, missing, p50: q(0.5), p99: q(0.99), max };
out.clientCpu = clientCpu;
console.log(JSON.stringify(out));
for (const c of closers) c();
process.exit(0);
"""

HP_SERVER = """
import { Server } from "@hocuspocus/server";
const server = new Server({ port: Number(process.argv[2]), address: "127.0.0.1", quiet: true });
await server.listen();
console.log("ready");
"""


def serve_folder() -> Path:
    """Node packages for the serving run: Hocuspocus's server beside the provider, Yjs and ws
    at the versions ``tests/e2e/yjs_peers/package.json`` pins."""
    pins = json.loads((ROOT / "tests" / "e2e" / "yjs_peers" / "package.json").read_text())
    deps = pins["dependencies"]
    packages = (
        "@hocuspocus/server@4",
        *(f"{n}@{deps[n]}" for n in ("@hocuspocus/provider", "yjs", "ws")),
    )
    return node_folder("text-serve", packages, {"serve.mjs": SERVE_SCRIPT, "hp.mjs": HP_SERVER})


def wait_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(600):  # bounded: 30 s
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError("the server did not come up")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def typed_through(
    folder: Path, system: str, url: str, trace: Path, args: argparse.Namespace, pid: int
) -> dict[str, Any]:
    before = cpu_seconds(pid)
    cmd = ["node", "serve.mjs", system, url, str(trace)]
    cmd += [str(v) for v in (args.docs, args.readers, args.every, args.serve_seconds)]
    cmd.append(JS_CLIENT.as_uri())
    done = subprocess.run(
        cmd, cwd=folder, capture_output=True, text=True, timeout=120 + args.serve_seconds * 6
    )
    if done.returncode != 0:
        raise RuntimeError(f"{system} clients failed: {done.stderr.strip()[-600:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["cpu"] = cpu_seconds(pid) - before
    return result


def through_servers(trace: Path, args: argparse.Namespace) -> None:
    """The trace's keystrokes typed into ``--docs`` documents, each read by ``--readers``
    readers: through ``octosync serve`` (octosync.js clients under Node, journaled before
    fan-out) and through Hocuspocus's server (in memory), one after the other."""
    try:
        folder = serve_folder()
    except NodeUnavailable as exc:
        print(f"through the servers: not run ({exc})")
        return
    rows: dict[str, dict[str, Any]] = {}
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="text-serve-") as data:
        port = free_port()
        config = Path(data) / "octosync.toml"
        config.write_text(f'[server]\njournal_durability = "{args.durability}"\n')
        serve = [sys.executable, "-m", "octosync.cli", "serve", "--insecure-dev"]
        proc = subprocess.Popen(
            [*serve, "--config", str(config), "--port", str(port), "--data", f"{data}/var"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        )
        try:
            wait_port(port, proc)
            rows[f"octosync serve ({args.durability})"] = typed_through(
                folder, "octosync", f"ws://127.0.0.1:{port}", trace, args, proc.pid
            )
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    port = free_port()
    hp = subprocess.Popen(
        ["node", "hp.mjs", str(port)],
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_port(port, hp)
        rows["Hocuspocus"] = typed_through(
            folder, "hocuspocus", f"ws://127.0.0.1:{port}", trace, args, hp.pid
        )
    finally:
        hp.kill()
        hp.wait()
    print(
        f"through a server: {args.docs} writers in {args.docs} documents, a keystroke each every"
        f" {args.every} ms for {args.serve_seconds:g} s, {args.readers} readers per document"
        f" (all clients in one Node process per system); load {load:.2f} before,"
        f" {os.getloadavg()[0]:.2f} after"
    )
    for name, r in rows.items():
        print(
            f"  {name:22} keystroke to its last reader p50 {r['p50']:6.1f} ms, p99 {r['p99']:6.1f}"
            f" ms, max {r['max']:6.1f} ms; {r['strokes']:,} keystrokes typed in"
            f" {r['typedFor']:.1f} s, {r['missing']} not at every reader;"
            f" CPU: server {r['cpu']:.2f} s, clients {r['clientCpu']:.2f} s"
        )
    a, b = rows[f"octosync serve ({args.durability})"], rows["Hocuspocus"]
    print(
        f"  ratio octosync / Hocuspocus: p99 {a['p99'] / b['p99']:.2f}x,"
        f" server CPU {a['cpu'] / max(b['cpu'], 1e-9):.2f}x"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, default=SHARED / "traces" / "automerge-paper.json.gz")
    ap.add_argument("--edits", type=int, default=10**9, help="replay only the first N edits")
    ap.add_argument("--serve-seconds", type=float, default=10.0, help="typing time; 0: skip")
    ap.add_argument("--serve-only", action="store_true", help="only the run through servers")
    ap.add_argument("--docs", type=int, default=20, help="documents, one writer each")
    ap.add_argument("--readers", type=int, default=5, help="readers per document")
    ap.add_argument(
        "--durability",
        choices=("full", "normal"),
        default="full",
        help="octosync's journal: fsync at every commit (full, the default) or not (normal)",
    )
    ap.add_argument("--every", type=int, default=20, help="ms between a writer's keystrokes")
    args = ap.parse_args()
    if args.serve_only:
        through_servers(args.trace, args)
        return
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

    ops = join_ops(entries)
    t_send, frames = timed(join_frames, ops)
    wire = sum(len(f) for f in frames)
    runs = []
    for _ in range(5):
        wall, out = timed(late_join, frames)
        runs.append((wall, out, CPU["late_join"]))
    t_join, joined, CPU["late_join"] = min(runs, key=lambda r: r[0])
    assert joined == text
    print(
        f"late joiner, octosync: {t_join * 1000:7.1f} ms (best of 5; {CPU['late_join'] * 1000:.0f}"
        f" ms CPU) to its full text, {wire:,} bytes in {len(frames)} frames"
        f" ({sum(len(s) for s in entries.values()):,} bytes of state); the server's encoding"
        f" of them {t_send * 1000:.1f} ms"
    )

    kept = compact_all(ops)
    kept_frames = join_frames(kept)
    kept_wire = sum(len(f) for f in kept_frames)
    t_kept, joined = timed(late_join, kept_frames)
    assert joined == text
    typed = sum(len(run[1]) for op in ops if "/tx/" in (op.key or "") for run in _runs(op))
    held = sum(len(run[1]) for op in kept if "/tx/" in (op.key or "") for run in _runs(op))
    print(
        f"tombstones collected (every member has seen every deletion): the entries hold"
        f" {held:,} characters of the {typed:,} typed ({len(text):,} visible),"
        f" {sum(len(op.state) for op in kept if isinstance(op.state, bytes)):,} bytes of state;"
        f" the server's passes {', '.join(f'{p * 1000:.0f}' for p in PASSES)} ms;"
        f" a late joiner {t_kept * 1000:.1f} ms,"
        f" {kept_wire:,} bytes"
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
    print(
        f"late joiner, Yjs: {y['join']:7.1f} ms (best of 5) to its full text,"
        f" {y['bytes']:,} bytes of update"
    )
    assert y["jsSame"]
    print(f"bytes to a late joiner after collection: {kept_wire / y['bytes']:.2f}x Yjs's update")
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
    if args.serve_seconds > 0:
        through_servers(args.trace, args)


if __name__ == "__main__":
    main()
