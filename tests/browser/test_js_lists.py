"""octosync.js and the Python client write the same list entries, byte for byte and stamp for
stamp, for any script of list edits, and report the same changes (each edit's event, and
the change between any two orders): hypothesis draws the scripts
and orders, one Node process runs them all, and each side's results are compared."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from octosync.crdt.replicated import Replicated
from octosync.crdt.seq import diff
from octosync.crdt.shared import SharedState
from octosync.graph import Context
from tests.browser.support import JS_CLIENT, node_command

START = 1_000_000
edits = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), st.integers(0, 40), st.integers(0, 9)),
        st.tuples(st.just("move"), st.integers(0, 40), st.integers(0, 40)),
        st.tuples(st.just("set"), st.integers(0, 40), st.text(max_size=3)),
        st.tuples(st.just("delete"), st.integers(0, 40)),
    ),
    max_size=40,
)

RUNNER = """
import {{ connect }} from {module};
const scripts = {scripts};
const out = [];
for (const script of scripts) {{
  let t = {start};
  const client = connect("ws://127.0.0.1:9", {{ backoff: {{ base: 60, cap: 60 }} }});
  const doc = client.openDocument("s", {{ peer: 77, clock: () => t++ }});
  doc.on("error", () => {{}});
  const list = doc.list("l");
  const edits = [];
  list.onEdit((change) => edits.push(change));
  for (const [op, a, b] of script) {{
    const n = list.length;
    if (op === "insert") list.insert(a % (n + 1), b);
    else if (n === 0) continue;
    else if (op === "move") list.move(a % n, b % n);
    else if (op === "set") list.set(a % n, b);
    else list.delete(a % n);
  }}
  const entries = [...doc.entries.values()].map((op) => [
    op.key, [op.stamp.wall_time, op.stamp.logical], [...op.bytes],
  ]);
  out.push({{ value: list.value, entries, edits }});
  client.close();
}}
console.log(JSON.stringify(out));
process.exit(0);
"""


def python_run(script: list[tuple[Any, ...]]) -> dict[str, Any]:
    ticks = iter(range(START, START + 10_000))
    state = SharedState(77, ticks.__next__)
    lst = Replicated(Context(), state).list("l")
    edits: list[dict[str, Any]] = []
    lst.on_edit(lambda change: edits.append(change.as_dict()))
    for op, a, *rest in script:
        n = len(lst)
        if op == "insert":
            lst.insert(a % (n + 1), rest[0])
        elif n == 0:
            continue
        elif op == "move":
            lst.move(a % n, rest[0] % n)
        elif op == "set":
            lst.set(a % n, rest[0])
        else:
            lst.delete(a % n)
    entries = sorted(
        [o.key, [o.stamp.wall_time, o.stamp.logical], list(o.state)]  # type: ignore[arg-type]
        for o in state.replica.ops()
    )
    return {"value": list(state.list_values("l")), "entries": entries, "edits": edits}


@settings(max_examples=4, deadline=None)
@given(st.lists(edits, min_size=10, max_size=10))
@example([[("insert", 0, 1), ("set", 0, "a\u2028b"), ("set", 0, "\x85")]] * 10)
def test_js_and_python_write_identical_list_entries(scripts: list[Any]) -> None:
    node = node_command()
    source = RUNNER.format(
        module=json.dumps((JS_CLIENT / "octosync.js").as_uri()),
        scripts=json.dumps(scripts),
        start=START,
    )
    run = subprocess.run(
        [*node, "--input-type=module", "-e", source],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=Path(__file__).parent,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    ran = json.loads(run.stdout.rstrip("\n").split("\n")[-1])  # values may hold U+2028 or NEL
    for script, js in zip(scripts, ran, strict=True):
        assert {**js, "entries": sorted(js["entries"])} == python_run(script)


CHANGES = """
import {{ listChange }} from {module};
const cases = {cases};
console.log(JSON.stringify(cases.map(([a, b]) => listChange(a, b))));
"""


@settings(max_examples=5, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.integers(0, 12), unique=True, max_size=12),
            st.randoms(use_true_random=False),
            st.lists(st.integers(0, 12), max_size=3),
        ),
        min_size=20,
        max_size=20,
    )
)
def test_js_and_python_report_the_same_change(cases: list[Any]) -> None:
    """The same inserts, deletes, moves and sets from both clients' change events."""
    abc = [["a", 1], ["b", 2], ["c", 3]]
    pairs = [  # one element moved: either neighbour could be said to have moved
        (abc, [abc[0], abc[2], abc[1]]),
        (abc, [abc[1], abc[2], abc[0]]),
        (abc, [abc[2], abc[0], abc[1]]),
        (abc, [abc[1], abc[0], abc[2]]),
        (abc, [["a", 10], abc[2], abc[1]]),  # a edited in place, so not trimmed
        (abc, [abc[1], abc[0], ["c", 30]]),
    ]
    for ids, rnd, edited in cases:
        old = [[str(i), i] for i in ids]
        new = [[str(i), i + 100 if i in edited else i] for i in ids if i % 4]
        rnd.shuffle(new)
        pairs.append((old, new))
    node = node_command()
    source = CHANGES.format(
        module=json.dumps((JS_CLIENT / "octosync.js").as_uri()), cases=json.dumps(pairs)
    )
    run = subprocess.run(
        [*node, "--input-type=module", "-e", source],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    for (old, new), js in zip(pairs, json.loads(run.stdout), strict=True):
        ours = diff([tuple(p) for p in old], [tuple(p) for p in new]).as_dict()
        assert js == ours
