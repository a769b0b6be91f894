"""Yjs updates written through a real server's ``/yjs`` face reach ``pipeline report``: per
document, writer and minute, how many and how many bytes."""

from __future__ import annotations

import asyncio
import csv
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pycrdt import Doc

from octosync.pipeline.jobs import report
from octosync.yjs import messages as m
from tests.e2e.helpers import serve
from tests.e2e.yjs_client import edit, next_body, open_hocuspocus

pytestmark = pytest.mark.spark


async def write(data: Path) -> dict[tuple[str, int], list[int]]:
    """Two connections write to two documents; returns (document, writer) -> update sizes."""
    sent: dict[tuple[str, int], list[int]] = {}
    async with serve(data, journal=True) as srv, aiohttp.ClientSession() as http:
        for who in range(2):
            async with http.ws_connect(f"{srv.ws_url}/yjs") as ws:
                for name, edits in (("notes", 3 + who), ("plan", 2)):
                    address = m.address_prefix(name)
                    await open_hocuspocus(ws, name)
                    doc: Doc[Any] = Doc()
                    for i in range(edits):
                        update = edit(doc, f"{who}:{i} " * (i + 1))
                        await ws.send_bytes(address + m.sync_update(update))
                        assert await next_body(ws, address) == m.sync_status(True)
                        sent.setdefault((name, who), []).append(len(update))
    return sent


def test_report_counts_yjs_updates_per_document_writer_and_minute(
    spark: Any, tmp_path: Path
) -> None:
    data = tmp_path / "var"
    sent = asyncio.run(write(data))
    result = report.run(spark, data, tmp_path / "report")
    assert result.yjs_updates == sum(len(sizes) for sizes in sent.values())
    with (tmp_path / "report" / "yjs_updates_per_minute.csv").open() as f:
        rows = list(csv.DictReader(f))
    updates: Counter[str] = Counter()
    size: Counter[str] = Counter()
    writers: dict[str, set[str]] = {}
    for row in rows:
        updates[row["document"]] += int(row["updates"])
        size[row["document"]] += int(row["bytes"])
        writers.setdefault(row["document"], set()).add(row["writer"])
    for name in ("notes", "plan"):
        mine = [s for (doc, _), sizes in sent.items() if doc == name for s in sizes]
        assert (updates[name], size[name]) == (len(mine), sum(mine))
        assert len(writers[name]) == 2  # one row set per connection
    assert "Yjs documents" in (tmp_path / "report" / "index.html").read_text()
