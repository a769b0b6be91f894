"""Replaying the editing traces of ``../shared/traces`` (josephg/editing-traces, CC BY 4.0).

A sequential trace is a list of patches ``[pos, deleted, inserted]`` applied in order. A
concurrent trace's transactions each name the transactions (``parents``) whose result its
positions are relative to, so each agent's replica must hold exactly that version when it
applies one: ``causal_writes`` replays it with one ``SharedText`` per agent, delivering to an
agent the other agents' entry writes of exactly the transactions in its parents' past, and
returns every agent's writes in trace order.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from octosync.crdt.text_entries import SharedText

AGENT_PEER = 1000
"""Agent ``i`` of a trace writes as peer ``AGENT_PEER + i``."""


def load(path: Path) -> dict[str, Any]:
    with gzip.open(path) as f:
        trace: dict[str, Any] = json.load(f)
    return trace


def patches(trace: dict[str, Any]) -> list[tuple[int, int, str]]:
    return [tuple(p) for txn in trace["txns"] for p in txn["patches"]]  # type: ignore[misc]


def edit(text: SharedText, pos: int, deleted: int, inserted: str) -> list[tuple[str, bytes]]:
    writes = text.delete(pos, deleted) if deleted else []
    return writes + (text.insert(pos, inserted) if inserted else [])


def causal_writes(trace: dict[str, Any]) -> list[tuple[int, list[tuple[str, bytes]]]]:
    """``(agent, writes)`` for every transaction, in trace order (each agent's own
    transactions form a chain, so a version is one count of transactions per agent)."""
    txns = trace["txns"]
    agents = int(trace["numAgents"])
    reps = [SharedText(AGENT_PEER + a) for a in range(agents)]
    for r in reps:
        r.listening = False
    seq: list[int] = []  # each transaction's place in its agent's chain
    counts = [0] * agents
    version: list[list[int]] = []  # transactions of each agent in each one's past, itself included
    done: list[list[list[tuple[str, bytes]]]] = [[] for _ in range(agents)]
    applied = [[0] * agents for _ in range(agents)]  # agent -> how many of each agent's it holds
    out: list[tuple[int, list[tuple[str, bytes]]]] = []
    for j, txn in enumerate(txns):
        a = txn["agent"]
        past = [0] * agents
        for p in txn["parents"]:
            past = [max(x, y) for x, y in zip(past, version[p], strict=True)]
        assert past[a] == counts[a], f"transaction {j} does not follow its agent's last one"
        for b in range(agents):
            if b == a:
                continue
            assert applied[a][b] <= past[b], f"transaction {j}: agent {a} saw too much"
            while applied[a][b] < past[b]:
                for rest, state in done[b][applied[a][b]]:
                    reps[a].receive(rest, state)
                applied[a][b] += 1
        writes: list[tuple[str, bytes]] = []
        for pos, deleted, inserted in txn["patches"]:
            writes += edit(reps[a], pos, deleted, inserted)
        seq.append(counts[a])
        counts[a] += 1
        applied[a][a] = counts[a]
        past[a] = counts[a]
        version.append(past)
        done[a].append(writes)
        out.append((a, writes))
    return out
