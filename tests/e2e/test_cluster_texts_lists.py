"""Shared texts and lists across a cluster, with real processes on loopback: a NATS server
(JetStream), two ``octosync serve --cluster`` nodes, and octosync's Python client writing
through each node at once. Only what clients see is checked, not how the nodes pass it on.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from octosync.client.shared import SharedDocument
from tests.e2e.test_cluster_maps import Cluster, cluster
from tests.e2e.test_cluster_planes import DOC, TIMEOUT, reader, state

__all__ = ["cluster"]  # the fixture: NATS and nodes n1, n2


async def type_into(doc: SharedDocument, words: str, drop: int) -> None:
    """Type ``words`` a character at a time at the end of the text as this writer sees it (the
    other writer's keystrokes land meanwhile), then delete ``drop`` of its own characters
    (each writer's alphabet is its own: upper or lower case)."""
    body = doc.text("notes")
    for ch in words:
        body.insert(len(body), ch)
        await asyncio.sleep(0.002)
    for ch in words[:drop]:
        body.delete(str(body).index(ch), 1)
        await asyncio.sleep(0.002)


async def edit_list(doc: SharedDocument, tag: str) -> None:
    """Push ten values, move the last to the front, replace one, remove one."""
    items = doc.list("order")
    for i in range(10):
        items.push(f"{tag}{i}")
        await asyncio.sleep(0.002)
    mine = [i for i, v in enumerate(items) if str(v).startswith(tag)]
    items.move(mine[-1], 0)
    await asyncio.sleep(0.002)
    at = list(items).index(f"{tag}3")
    items.set(at, f"{tag}3!")
    await asyncio.sleep(0.002)
    items.delete(list(items).index(f"{tag}5"))


@pytest.mark.slow
async def test_a_text_and_a_list_edited_on_both_nodes_converge_everywhere(
    cluster: Cluster,
) -> None:
    """A writer on node 1 and a writer on node 2 type into one text (with deletions) and edit
    one list (pushes, a move, a set, a removal) at once: node 1's edits reach node 2's client,
    and every client, including replicas joining each node afterwards, ends with the same text,
    the same list and the same entries, byte for byte."""
    n1, n2 = cluster.nodes["n1"], cluster.nodes["n2"]
    one_words, two_words = "THE QUICK BROWN FOX", "jumps.over.a.lazy.dog"
    async with (
        SharedDocument(n1.lazily, DOC) as one,
        SharedDocument(n2.lazily, DOC) as two,
    ):
        await one.synced(TIMEOUT)
        await two.synced(TIMEOUT)
        await asyncio.wait_for(
            asyncio.gather(
                type_into(one, one_words, 4),
                type_into(two, two_words, 6),
                edit_list(one, "a"),
                edit_list(two, "b"),
            ),
            TIMEOUT,
        )
        await one.synced(TIMEOUT)
        await two.synced(TIMEOUT)
        # Node 1's writing, seen by node 2's client (and the other way round).
        want_chars = Counter(one_words[4:] + two_words[6:])
        for doc in (one, two):
            await doc.wait_until(
                lambda d=doc: (
                    Counter(str(d.text("notes"))) == want_chars and len(d.list("order")) == 18
                ),
                TIMEOUT,
            )
        values = list(two.list("order"))
        want_values = {f"{t}{i}" for t in "ab" for i in range(10) if i != 5}
        want_values = {v + "!" if v.endswith("3") else v for v in want_values}
        assert sorted(values) == sorted(want_values)  # a move never duplicates
        assert values.index("a9") < values.index("a0")
        assert values.index("b9") < values.index("b0")
        await one.wait_until(lambda: state(one) == state(two), TIMEOUT)
        text, order, entries = str(one.text("notes")), list(one.list("order")), state(one)
        assert str(two.text("notes")) == text
        assert list(two.list("order")) == order
    for node in (n1, n2):  # late joiners on each node get the same document
        async with reader(node) as late:
            await late.wait_until(lambda d=late: state(d) == entries, TIMEOUT)
            assert str(late.text("notes")) == text
            assert list(late.list("order")) == order
