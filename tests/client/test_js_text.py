"""octosync.js's text and the Python one make the same chunk entries, byte for byte: the same
scripts of inserts, deletes (code points beyond the BMP included) and exchanges between two
replicas run in both, every write compared, and the texts equal. The JS text's change events
(one per run, or one for a large received batch) applied in turn give its text."""

from __future__ import annotations

import base64
import json
import subprocess
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from octosync.crdt import text_collect
from octosync.crdt.plane import stamp_key
from octosync.crdt.shared import SharedState
from octosync.crdt.text_entries import SharedText
from octosync.ipc.messages import CrdtOp, WireStamp
from tests.browser.support import JS_CLIENT, node_command
from tests.conftest import trace_file


def node_json(script: str, *, stdin: str | None = None, timeout: int = 60, **fields: str) -> Any:
    """What ``script`` (formatted with octosync.js's URL as ``module`` and ``fields``) prints
    as JSON when run by Node as an ES module, ``stdin`` on its standard input."""
    module = json.dumps((JS_CLIENT / "octosync.js").as_uri())
    done = subprocess.run(
        [*node_command(), "--input-type=module", "-e", script.format(module=module, **fields)],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


HARNESS = """
import {{ TextEntries }} from {module};
const steps = JSON.parse(await new Promise((ok) => {{
  let data = "";
  process.stdin.on("data", (c) => (data += c));
  process.stdin.on("end", () => ok(data));
}}));
const reps = {{ 11: new TextEntries(11), 22: new TextEntries(22) }};
const latest = {{ 11: new Map(), 22: new Map() }};
const shown = {{ 11: "", 22: "" }};
for (const r of Object.values(reps)) r.listening = true;
reps[22].batchRows = 1;  // 11 reports each run's edit, 22 a batch's change as one edit
const apply = (s, edits) => {{
  const cps = Array.from(s);
  for (const e of edits) cps.splice(e.index, e.delete, ...Array.from(e.insert));
  return cps.join("");
}};
const out = [];
for (const [op, who, a, b] of steps) {{
  let writes = [];
  if (op === "ins") writes = reps[who].insert(Math.min(a, reps[who].crdt.length), b);
  else if (op === "del") {{
    const n = reps[who].crdt.length;
    if (n) {{ const i = a % n; writes = reps[who].delete(i, Math.min(b, n - i)); }}
  }} else for (const [rest, json] of latest[who]) reps[a].receive(rest, JSON.parse(json));
  for (const [rest, json] of writes) latest[who].set(rest, json);
  out.push(writes);
  for (const w of [11, 22]) shown[w] = apply(shown[w], reps[w].takeEdits());
}}
const texts = [reps[11].crdt.toString(), reps[22].crdt.toString()];
console.log(JSON.stringify({{ writes: out, texts, shown: [shown[11], shown[22]] }}));
"""

TEXT = st.text(alphabet="ab\u00e9\U0001f600\n", min_size=1, max_size=80)
STEP = st.one_of(
    st.tuples(st.just("ins"), st.sampled_from([11, 22]), st.integers(0, 200), TEXT),
    st.tuples(st.just("del"), st.sampled_from([11, 22]), st.integers(0, 200), st.integers(1, 70)),
    st.tuples(st.just("sync"), st.sampled_from([11, 22]), st.sampled_from([11, 22]), st.just(0)),
)


def python_run(steps: list[tuple[str, int, Any, Any]]) -> dict[str, Any]:
    reps = {11: SharedText(11), 22: SharedText(22)}
    latest: dict[int, dict[str, bytes]] = {11: {}, 22: {}}
    out = []
    for op, who, a, b in steps:
        writes: list[tuple[str, bytes]] = []
        r = reps[who]
        if op == "ins":
            writes = r.insert(min(a, len(r.crdt)), b)
        elif op == "del":
            if len(r.crdt):
                i = a % len(r.crdt)
                writes = r.delete(i, min(b, len(r.crdt) - i))
        else:
            for rest, state in latest[who].items():
                reps[a].receive(rest, state)
        latest[who].update(writes)
        out.append([[rest, state.decode()] for rest, state in writes])
    return {"writes": out, "texts": [str(reps[11]), str(reps[22])]}


@settings(max_examples=15, deadline=None)
@given(st.lists(STEP, min_size=1, max_size=40))
def test_js_and_python_texts_write_the_same_entries(steps: list[tuple[str, int, Any, Any]]) -> None:
    got = node_json(HARNESS, stdin=json.dumps(steps))
    shown = got.pop("shown")
    assert got == python_run(steps)
    assert shown == got["texts"]  # the change events, applied in turn, give the text


TRACE = """
import {{ TextEntries }} from {module};
import {{ readFileSync }} from "node:fs";
import {{ gunzipSync }} from "node:zlib";
const trace = JSON.parse(gunzipSync(readFileSync({trace})));
const writer = new TextEntries(1);
const entries = new Map();
for (const [pos, del, ins] of trace.txns.flatMap((t) => t.patches)) {{
  if (del) for (const [k, v] of writer.delete(pos, del)) entries.set(k, v);
  if (ins) for (const [k, v] of writer.insert(pos, ins)) entries.set(k, v);
}}
const joiner = new TextEntries(2);
for (const [k, v] of [...entries].sort()) joiner.receive(k, JSON.parse(v));
const watcher = new TextEntries(3);  // a text someone opened: its change reported as it goes
watcher.listening = true;
let shown = "";
const edited = (s, e) => [...s].toSpliced(e.index, e.delete, ...e.insert).join("");
for (const [k, v] of [...entries].sort()) {{
  watcher.receive(k, JSON.parse(v));
  if (k.endsWith("0")) for (const e of watcher.takeEdits()) shown = edited(shown, e);
}}
for (const e of watcher.takeEdits()) shown = edited(shown, e);
const end = trace.endContent;
const ok = writer.crdt.toString() === end && joiner.crdt.toString() === end && shown === end;
console.log(JSON.stringify({{ ok, entries: entries.size }}));
"""


@pytest.mark.slow
def test_js_text_types_the_automerge_paper_and_a_late_joiner_gets_it() -> None:
    trace = trace_file("automerge-paper.json.gz")
    got = node_json(TRACE, timeout=300, trace=json.dumps(str(trace)))
    assert got == {"ok": True, "entries": 2960}


SWAP = """
import {{ TextEntries }} from {module};
const out = [];
// each pair shares one half of its surrogate pair: the low (U+1F600, U+1F603) or the high
// (U+1F600, U+1F200) half, so a batch's one edit must not start or end between the halves
for (const [was, now] of [["\\u{{1F600}}", "\\u{{1F603}}"], ["\\u{{1F600}}", "\\u{{1F200}}"]]) {{
  const writer = new TextEntries(1);
  const reader = new TextEntries(2);
  reader.listening = true;
  reader.batchRows = 0;
  const send = (writes) => {{ for (const [k, v] of writes) reader.receive(k, JSON.parse(v)); }};
  send(writer.insert(0, `a${{was}}b`));
  reader.takeEdits();
  send(writer.delete(1, 1));
  send(writer.insert(1, now));
  out.push(reader.takeEdits());
}}
console.log(JSON.stringify(out));
"""


def test_a_batchs_one_edit_keeps_surrogate_pairs_whole() -> None:
    assert node_json(SWAP) == [
        [{"index": 1, "delete": 1, "insert": "\U0001f603"}],
        [{"index": 1, "delete": 1, "insert": "\U0001f200"}],
    ]


# --- the server's compaction of a text's closed chunks (crdt/text_collect.py) ---------------------

OBSERVE = """
import {{ SharedDocument }} from {module};
const frames = JSON.parse(await new Promise((ok) => {{
  let data = "";
  process.stdin.on("data", (c) => (data += c));
  process.stdin.on("end", () => ok(data));
}}));
// a document that takes crdt_sync frames as its connection would hand them over
const client = {{ maxFrameSize: 1 << 26, urls: ["ws://127.0.0.1:9"] }};
const doc = new SharedDocument(client, "d", {{ peer: 51 }});
const text = doc.text("t");
let shown = "";
let events = [];
text.on("change", (edits) => {{
  events.push(...edits);
  for (const e of edits) shown = [...shown].toSpliced(e.index, e.delete, ...e.insert).join("");
}});
const out = [];
for (const ops of frames) {{
  events = [];
  doc.received(JSON.stringify({{ type: "crdt_sync", ops }}));
  const crdt = doc.textEntries("t").crdt;
  // remembered deletions of characters a compacted chunk did not keep (they never come)
  const inside = (k, [c, n]) => crdt.closed.get(k).some(([a, m]) => a <= c && c + n <= a + m);
  const closedTombs = [...crdt.tombs]
    .filter(([k, rs]) => crdt.closed.has(k) && rs.some((r) => !inside(k, r))).length;
  const [tombs, tombstones] = [crdt.tombs.size, crdt.tombstones()];
  out.push({{ text: crdt.toString(), tombstones, shown, events, tombs, closedTombs }});
}}
console.log(JSON.stringify(out));
"""


def wire(op: CrdtOp) -> dict[str, Any]:
    """An op as a crdt_sync frame carries it."""
    assert isinstance(op.state, bytes)
    stamp = {"wall_time": op.stamp.wall_time, "logical": op.stamp.logical, "peer": op.stamp.peer}
    state = base64.b64encode(op.state).decode()
    return {"slot_id": op.slot_id, "key": op.key, "stamp": stamp, "state": state}


def js_observe(frames: list[list[CrdtOp]]) -> list[dict[str, Any]]:
    """What a JS document shows after each of ``frames`` (text, tombstones, events)."""
    out: list[dict[str, Any]] = node_json(
        OBSERVE, stdin=json.dumps([[wire(op) for op in frame] for frame in frames])
    )
    return out


class Room:
    """Writers of text ``t`` and the server between them: every write is one frame of the log
    (the order the server takes and sends them), and ``collect`` adds the server's compaction
    of what every writer has seen as a frame of its own."""

    def __init__(self, peers: tuple[int, ...]) -> None:
        self.tick = 1_000
        self.writers = {p: SharedState(p, lambda: self.tick) for p in peers}
        for w in self.writers.values():
            w.text_of("t")
        self.log: list[list[CrdtOp]] = []
        self.held: dict[str, CrdtOp] = {}
        self.taken = dict.fromkeys(peers, 0)
        self.last_rewrite: WireStamp | None = None

    def send(self, ops: list[CrdtOp]) -> None:
        self.tick += 1
        if not ops:
            return
        for op in ops:
            assert op.key is not None
            was = self.held.get(op.key)
            if was is None or stamp_key(op.stamp) > stamp_key(was.stamp):
                self.held[op.key] = op
        self.log.append(ops)

    def insert(self, who: int, index: int, text: str) -> None:
        w = self.writers[who]
        self.send(w.text_insert("t", min(index, len(w.text_of("t").crdt)), text))

    def delete(self, who: int, index: int, count: int) -> None:
        w = self.writers[who]
        n = len(w.text_of("t").crdt)
        if n:
            i = index % n
            self.send(w.text_delete("t", i, min(count, n - i)))

    def sync(self, who: int) -> None:
        for frame in self.log[self.taken[who] :]:
            self.writers[who].receive(frame)
        self.taken[who] = len(self.log)

    def collect(self) -> list[CrdtOp]:
        """Every writer takes the whole log (so every deletion is stable), then the server
        compacts: the watermark is each writer's latest stamp."""
        for who in self.writers:
            self.sync(who)
        mark: dict[int, tuple[int, int, int]] = {}
        for op in self.held.values():
            if op.stamp.peer:
                mark[op.stamp.peer] = max(mark.get(op.stamp.peer, (0, 0, 0)), stamp_key(op.stamp))
        rewrites = text_collect.compact("t", self.held.values(), mark, self.last_rewrite, self.tick)
        if rewrites:
            self.last_rewrite = rewrites[-1].stamp
        self.send(rewrites)
        return rewrites


GC_TEXT = st.text(alphabet="ab\u00e9\U0001f600\n", min_size=8, max_size=90)
GC_STEP = st.one_of(
    # long inserts fill chunks their writers then leave; a delete often takes the text's tail,
    # which holds the ends of runs (what the server can collect of a run is a deleted suffix)
    st.tuples(st.just("ins"), st.sampled_from([1, 2, 3]), st.integers(0, 300), GC_TEXT),
    st.tuples(st.just("del"), st.sampled_from([1, 2, 3]), st.integers(0, 300), st.integers(1, 300)),
    st.tuples(st.just("sync"), st.sampled_from([1, 2, 3]), st.just(0), st.just(0)),
    st.tuples(st.just("gc"), st.just(0), st.just(0), st.just(0)),
    # an observer takes the log since it last did, frame by frame, or (reconnecting) the
    # server's entries in one frame, in key order or reversed, or (a late joiner) in key order
    # in frames of two entries
    st.tuples(
        st.just("obs"),
        st.sampled_from(["log", "key", "reversed", "joiner"]),
        st.just(0),
        st.just(0),
    ),
)


@settings(max_examples=50, deadline=None)
@given(st.lists(GC_STEP, min_size=12, max_size=40))
def test_js_and_python_replicas_take_the_servers_compactions_alike(
    steps: list[tuple[str, Any, Any, Any]],
) -> None:
    room = Room((1, 2, 3))
    frames: list[list[CrdtOp]] = []
    seen = 0
    for op, a, b, c in [*steps, ("gc", 0, 0, 0), ("obs", "key", 0, 0)]:
        if op == "ins":
            room.insert(a, b, c)
        elif op == "del":
            room.delete(a, b, c)
        elif op == "sync":
            room.sync(a)
        elif op == "gc":
            room.collect()
        elif a == "log":
            frames.extend(room.log[seen:])
            seen = len(room.log)
        elif a == "joiner":
            held = sorted(room.held.values(), key=lambda o: o.key or "")
            frames.extend(held[i : i + 2] for i in range(0, len(held), 2))
            seen = len(room.log)
        else:
            frames.append(sorted(room.held.values(), key=lambda o: o.key or "", reverse=a != "key"))
            seen = len(room.log)
    python = SharedState(50, lambda: 0)
    text = python.text_of("t")
    text.listening = True
    expected = []
    for frame in frames:
        python.receive(frame)
        text.take_edits()
        expected.append({"text": str(text.crdt), "tombstones": text.crdt.tombstones()})
    got = js_observe(frames)
    assert [{"text": g["text"], "tombstones": g["tombstones"]} for g in got] == expected
    assert not any(g["closedTombs"] for g in got)  # no deletion waits for a collected character
    assert all(g["shown"] == g["text"] for g in got)  # the events, applied in turn, give the text
    for who in room.writers:  # each writer, the whole log taken, holds what the observers hold
        room.sync(who)
        writer = room.writers[who].text_of("t").crdt
        assert (got[-1]["text"], got[-1]["tombstones"]) == (str(writer), writer.tombstones())


def collected_tail() -> tuple[Room, list[CrdtOp], CrdtOp]:
    """Writer 1 types 63 characters (its chunk 0) and then 5 more at the start (chunk 1, so it
    has left chunk 0); writer 2 deletes the last 5 of the 63, a run's tail nothing names. The
    server's compaction cuts them from chunk 0. Returns the room, the rewrites and the deletion."""
    room = Room((1, 2))
    room.insert(1, 0, "a" * 60 + "\U0001f600bc")
    room.insert(1, 0, "ZZZZZ")
    room.sync(2)
    room.delete(2, 63, 5)
    deletion = room.log[-1][0]
    rewrites = room.collect()
    assert [(op.key, op.state) for op in rewrites] == [
        ("t/tx/1/0", b'[[1,"' + b"a" * 58 + b'",0,0]]')
    ]
    return room, rewrites, deletion


@pytest.mark.parametrize("deletion_first", [False, True])
def test_a_deletion_of_collected_characters_is_not_remembered(deletion_first: bool) -> None:
    """A joiner holding none of the chunk's characters: the deletion of the ones the server
    collected names characters that never come, so it must not wait for them."""
    room, rewrites, deletion = collected_tail()
    chunk1 = room.held["t/tx/1/1"]
    frames = (
        [[deletion], [*rewrites, chunk1]] if deletion_first else [[*rewrites, chunk1], [deletion]]
    )
    got = js_observe(frames)
    assert got[-1]["text"] == "ZZZZZ" + "a" * 58
    assert (got[-1]["tombstones"], got[-1]["tombs"]) == (0, 0)
    python = SharedState(50, lambda: 0)
    for frame in frames:
        python.receive(frame)
    assert (str(python.text_of("t").crdt), python.text_of("t").crdt.tombstones()) == (
        "ZZZZZ" + "a" * 58,
        0,
    )


def test_a_visible_character_the_server_collected_goes_as_a_delete_event() -> None:
    """A replica that held the characters and had not seen their deletion when the rewrite came
    (it comes in a later frame) sees them go at once, as a delete edit; the deletion then
    changes nothing and is not remembered."""
    room, rewrites, deletion = collected_tail()
    typed = [frame for frame in room.log if frame[0].stamp.peer == 1]
    got = js_observe([*typed, rewrites, [deletion]])
    before, compacted, deleted = got[-3:]
    assert before["text"] == "ZZZZZ" + "a" * 60 + "\U0001f600bc"
    assert compacted["events"] == [{"index": 63, "delete": 5, "insert": ""}]
    assert (compacted["text"], compacted["shown"]) == ("ZZZZZ" + "a" * 58, "ZZZZZ" + "a" * 58)
    assert (deleted["events"], deleted["text"], deleted["tombs"]) == ([], "ZZZZZ" + "a" * 58, 0)


OWN = """
import {{ TextEntries }} from {module};
const w = new TextEntries(1);
w.insert(0, "a".repeat(60) + "\\u{{1F600}}bc");
w.insert(0, "ZZZZZ");
w.receive("td/2/0", [[1, 59, 5]]);
w.receive("tx/1/0", {rewrite}, true);
const writes = w.insert(63, "!");
const [chunks, tombstones] = [[...w.mine.keys()], w.crdt.tombstones()];
console.log(JSON.stringify({{ text: w.crdt.toString(), chunks, tombstones, writes }}));
"""


def test_a_writer_drops_its_record_of_a_chunk_the_server_rewrote() -> None:
    """The writer of a compacted chunk never writes it again: it keeps no copy of it, and its
    text drops what the server collected like any replica's."""
    _, rewrites, _ = collected_tail()
    got = node_json(OWN, rewrite=rewrites[0].state.decode())
    assert got["text"] == "ZZZZZ" + "a" * 58 + "!"
    assert (got["chunks"], got["tombstones"]) == ([1], 0)
    assert got["writes"] == [["tx/1/1", '[[64,"ZZZZZ",0,0],[69,"!",1,58]]']]


def test_a_run_waiting_for_its_origin_keeps_only_what_the_server_kept() -> None:
    """A replica holding a run whose origin has not come yet (a joiner's frames in key order)
    takes the run's compaction before the origin: when the origin comes, the run is placed
    without the characters the server collected, as every other replica holds it."""
    room = Room((1, 2))
    room.insert(2, 0, "xyz")
    room.sync(1)
    room.insert(1, 1, "a" * 60)  # after writer 2's x: waits for it on a replica without it
    room.insert(1, 0, "ZZZZZ")
    room.sync(2)
    room.delete(2, 61, 5)
    original = room.held["t/tx/1/0"]
    rewrites = room.collect()
    assert [op.key for op in rewrites] == ["t/tx/1/0"]
    later = [room.held["t/td/2/0"], room.held["t/tx/2/0"], room.held["t/tx/1/1"]]
    got = js_observe([[original], rewrites, later])
    room.sync(1)
    writer = room.writers[1].text_of("t").crdt
    assert str(writer) == "ZZZZZx" + "a" * 55 + "yz"
    assert (got[-1]["text"], got[-1]["tombstones"]) == (str(writer), writer.tombstones())


def test_a_joiner_taking_a_compacted_chunk_before_its_origins_keeps_its_deletions() -> None:
    """Entries one at a time in key order: the deletions first, then a compacted chunk whose
    kept runs wait for origins of a later entry. A deletion of a kept character (a tombstone
    the next character names) must still apply when it lands."""
    room = Room((1, 2))
    room.insert(2, 0, "xy")  # (2, 1..2): t/tx/2/0 comes last in key order
    room.sync(1)
    room.insert(1, 1, "A" * 60)  # (1, 3..62) after x
    room.insert(1, 62, "B" * 10)  # after y: chunk 0 is left
    room.sync(2)
    room.delete(2, 11, 3)  # A's inside the run: kept (the next A names them)
    room.delete(1, 56, 5)  # the run's last 5 A's: nothing names them, they go
    room.sync(1)
    room.sync(2)
    want = str(room.writers[1].text_of("t").crdt)
    assert [op.key for op in room.collect()] == ["t/tx/1/0"]
    frames = [[op] for op in sorted(room.held.values(), key=lambda o: o.key or "")]
    assert js_observe(frames)[-1]["text"] == want
