"""The real Yjs providers against ``/yjs``: y-websocket's ``WebsocketProvider`` and
``@hocuspocus/provider`` under Node (npm packages pinned in ``tests/e2e/yjs_peers/package.json``,
installed once into ``~/.cache/octosync/yjs-peers``). Two providers edit one ``Y.Text`` and
one ``Y.Map`` at once; both end equal to each other and to what a pycrdt reader gets from the
server; a document named ``notes`` is the same whichever protocol opens it."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.conftest import missing, node_executable
from tests.e2e.helpers import serve
from tests.e2e.yjs_client import read_document, view

pytestmark = pytest.mark.peer

PEERS = Path(__file__).parent / "yjs_peers"
CACHE = Path.home() / ".cache" / "octosync" / "yjs-peers"


@pytest.fixture(scope="module")
def peers() -> Path:
    """The cache folder with the providers installed (npm install when the pins changed)."""
    node_executable()
    npm = shutil.which("npm")
    if npm is None:
        missing("npm not found on PATH: the Yjs providers are not installed")
    CACHE.mkdir(parents=True, exist_ok=True)
    wanted = (PEERS / "package.json").read_text()
    installed = CACHE / "package.json"
    if not (CACHE / "node_modules").is_dir() or installed.read_text() != wanted:
        installed.write_text(wanted)
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--ignore-scripts"],
            cwd=CACHE,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0:
            missing(f"npm install of the Yjs providers failed: {done.stderr[-500:]}")
    shutil.copy(PEERS / "edit.mjs", CACHE / "edit.mjs")
    return CACHE


async def edit(
    peers: Path, a: str, b: str, ws_url: str, name: str, b_url: str | None = None
) -> dict[str, Any]:
    """Providers ``a`` and ``b`` edit ``name`` at once (``b`` on ``b_url`` if given)."""
    env = {**os.environ, "BASE_B": b_url} if b_url else None
    proc = await asyncio.create_subprocess_exec(
        node_executable(),
        str(peers / "edit.mjs"),
        a,
        b,
        ws_url,
        name,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result


@pytest.mark.parametrize(
    ("a", "b"),
    [("y-websocket", "y-websocket"), ("hocuspocus", "hocuspocus"), ("y-websocket", "hocuspocus")],
)
async def test_two_providers_edit_one_document_and_end_equal_to_the_server(
    tmp_path: Path, peers: Path, a: str, b: str
) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        result = await edit(peers, a, b, srv.ws_url, "notes")
        server = view(await read_document(http, srv.ws_url, "notes"))
    assert result["a"] == result["b"] == server
    assert len(server["map"]) == 41  # 20 keys each and "last"
    assert sorted(server["text"].rstrip(";").split(";")) == sorted(
        f"{who}{i}" for who in "ab" for i in range(20)
    )
    assert sorted(result["awareness"]["a"]) == ["a", "b"]  # each saw the other's presence


async def test_a_document_is_the_same_whichever_protocol_opens_it(
    tmp_path: Path, peers: Path
) -> None:
    """Hocuspocus's pair writes ``notes``, then y-websocket's pair opens it and adds to it:
    the second pair starts from the first's edits."""
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        first = await edit(peers, "hocuspocus", "hocuspocus", srv.ws_url, "notes")
        second = await edit(peers, "y-websocket", "y-websocket", srv.ws_url, "notes")
        server = view(await read_document(http, srv.ws_url, "notes"))
    assert second["a"] == server
    for piece in first["a"]["text"].rstrip(";").split(";"):
        assert server["text"].count(piece + ";") == 2  # once from each pair
