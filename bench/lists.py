"""Shared lists: one script of edits replayed into one list, beside Yjs in the same run.

The script (seeded): inserts at random indexes, moves, value edits and deletions. It is
replayed into

* octosync's Python replica (``Replicated`` over ``SharedState``: the ops it would send,
  each applied and read back as the list's value);
* octosync.js's ``doc.list`` (a document that never connects: local edits only);
* Yjs's ``Y.Array`` under Node (npm ``yjs``; a move is a delete and an insert there, as Yjs
  has no move, and a set likewise);
* a plain Python list (no CRDT: the floor).

Each prints its time and edits per second, with its ratio to Yjs; the machine's load average
is printed beside them. ``--quick`` for a short check.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np

from _harness import NodeUnavailable, node_folder
from octosync.crdt.replicated import Replicated
from octosync.crdt.shared import SharedState
from octosync.graph import Context

JS_CLIENT = Path(__file__).resolve().parents[1] / "clients" / "js" / "octosync.js"

RUNNER = """
import * as Y from "yjs";
const { connect } = await import(process.argv[2]);
const { readFile } = await import("node:fs/promises");
const script = JSON.parse(await readFile(process.argv[3], "utf8"));

function replay(list) {
  for (const [op, a, b] of script) {
    const n = list.length();
    if (op === 0) list.insert(a % (n + 1), b);
    else if (n === 0) continue;
    else if (op === 1) list.move(a % n, b % n);
    else if (op === 2) list.set(a % n, b);
    else list.del(a % n);
  }
  return list.length();
}

const doc = new Y.Doc();
const arr = doc.getArray("l");
let t = performance.now();
const yLen = replay({
  length: () => arr.length,
  insert: (i, v) => arr.insert(i, [v]),
  move: (i, j) => { const v = arr.get(i); arr.delete(i, 1); arr.insert(j, [v]); },
  set: (i, v) => { arr.delete(i, 1); arr.insert(i, [v]); },
  del: (i) => arr.delete(i, 1),
});
const yjs = performance.now() - t;

let tick = 1;
const client = connect("ws://127.0.0.1:9", { backoff: { base: 600, cap: 600 } });
const shared = client.openDocument("bench", { peer: 7, clock: () => tick++ });
shared.on("error", () => {});
const list = shared.list("l");
t = performance.now();
const oLen = replay({
  length: () => list.length,
  insert: (i, v) => list.insert(i, v),
  move: (i, j) => list.move(i, j),
  set: (i, v) => list.set(i, v),
  del: (i) => list.delete(i),
});
const octo = performance.now() - t;
client.close();
console.log(JSON.stringify({ yjs, octo, yLen, oLen }));
process.exit(0);
"""


def script(n: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    kinds = rng.choice(4, size=n, p=[0.6, 0.15, 0.15, 0.1])
    a = rng.integers(0, 1 << 30, size=n)
    b = rng.integers(0, 1 << 30, size=n)
    return [[int(k), int(x), int(y)] for k, x, y in zip(kinds, a, b, strict=True)]


def replay_python(edits: list[list[int]]) -> tuple[float, int]:
    ticks = iter(range(1, 10 * len(edits) + 10))
    lst = Replicated(Context(), SharedState(7, ticks.__next__)).list("l")
    t = time.perf_counter()
    for op, a, b in edits:
        n = len(lst)
        if op == 0:
            lst.insert(a % (n + 1), b)
        elif n == 0:
            continue
        elif op == 1:
            lst.move(a % n, b % n)
        elif op == 2:
            lst.set(a % n, b)
        else:
            lst.delete(a % n)
    return time.perf_counter() - t, len(lst)


def replay_plain(edits: list[list[int]]) -> tuple[float, int]:
    lst: list[Any] = []
    t = time.perf_counter()
    for op, a, b in edits:
        n = len(lst)
        if op == 0:
            lst.insert(a % (n + 1), b)
        elif n == 0:
            continue
        elif op == 1:
            lst.insert(b % n, lst.pop(a % n))
        elif op == 2:
            lst[a % n] = b
        else:
            del lst[a % n]
    return time.perf_counter() - t, len(lst)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edits", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=36)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n = 2_000 if args.quick else args.edits
    edits = script(n, args.seed)
    py, py_len = replay_python(edits)
    plain, plain_len = replay_plain(edits)
    assert py_len == plain_len, (py_len, plain_len)
    print(f"list edits: {n:,} (60% insert, 15% move, 15% set, 10% delete), {py_len:,} left")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    rows = [("octosync Python", py), ("plain Python list", plain)]
    try:
        folder = node_folder("lists-bench", ("yjs@13",), {"run.mjs": RUNNER})
    except NodeUnavailable as exc:
        print(f"yjs: skipped ({exc})")
        yjs = None
    else:
        path = folder / "script.json"
        path.write_text(json.dumps(edits))
        done = subprocess.run(
            ["node", "--experimental-websocket", "run.mjs", JS_CLIENT.as_uri(), str(path)],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=900,
            check=True,
        )
        out = json.loads(done.stdout.strip().splitlines()[-1])
        assert out["yLen"] == out["oLen"] == py_len, out
        yjs = out["yjs"] / 1000
        rows += [("octosync.js", out["octo"] / 1000), ("Yjs Y.Array", yjs)]
    for name, seconds in rows:
        ratio = f"   {seconds / yjs:5.1f}x Yjs" if yjs else ""
        print(f"{name:<18} {seconds * 1000:9.1f} ms   {n / seconds:>12,.0f} edits/s{ratio}")


if __name__ == "__main__":
    main()
