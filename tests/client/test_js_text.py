"""octosync.js's text and the Python one make the same chunk entries, byte for byte: the same
scripts of inserts, deletes (code points beyond the BMP included) and exchanges between two
replicas run in both, every write compared, and the texts equal. The JS text's change events
(one per run, or one for a large received batch) applied in turn give its text."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from octosync.crdt.text_entries import SharedText
from tests.browser.support import JS_CLIENT, node_command
from tests.conftest import trace_file

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
    module = json.dumps((JS_CLIENT / "octosync.js").as_uri())
    done = subprocess.run(
        [*node_command(), "--input-type=module", "-e", HARNESS.format(module=module)],
        input=json.dumps(steps),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout)
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
    module = json.dumps((JS_CLIENT / "octosync.js").as_uri())
    done = subprocess.run(
        [
            *node_command(),
            "--input-type=module",
            "-e",
            TRACE.format(module=module, trace=json.dumps(str(trace))),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {"ok": True, "entries": 2960}


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
    module = json.dumps((JS_CLIENT / "octosync.js").as_uri())
    done = subprocess.run(
        [*node_command(), "--input-type=module", "-e", SWAP.format(module=module)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == [
        [{"index": 1, "delete": 1, "insert": "\U0001f603"}],
        [{"index": 1, "delete": 1, "insert": "\U0001f200"}],
    ]
