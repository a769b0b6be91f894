"""Two Python peers meet through /signal and carry the state plane over a WebRTC data channel
(aiortc, host candidates on loopback only): handshake, snapshot, deltas, a resync."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from octosync.client.signaling import SignalingClient
from octosync.graph import Context
from octosync.ipc.messages import Delta, ResyncRequest
from octosync.ipc.mirror import Mirror
from octosync.wire import json as wire_json
from tests.conftest import require_module
from tests.e2e.helpers import TIMEOUT, serve

require_module("aiortc", "the webrtc extra")

from octosync.client import webrtc  # noqa: E402

LOOPBACK = ("127.0.0.1",)


@pytest.mark.slow
async def test_state_plane_over_a_data_channel(tmp_path: Path) -> None:
    async with (
        serve(tmp_path) as srv,
        SignalingClient(f"{srv.ws_url}/signal", "room") as one,
        SignalingClient(f"{srv.ws_url}/signal", "room") as two,
    ):
        await one.join(1)
        await two.join(2)
        await one.receive(TIMEOUT)  # peer-joined 2
        answering = asyncio.ensure_future(webrtc.answer(two, hosts=LOOPBACK, timeout=TIMEOUT))
        link_one = await webrtc.offer(one, 2, hosts=LOOPBACK, timeout=TIMEOUT)
        caller, link_two = await answering
        assert caller == 1
        for link in (link_one, link_two):
            candidates = [
                line for line in link.pc.localDescription.sdp.splitlines() if "candidate:" in line
            ]
            assert candidates
            assert all(" 127.0.0.1 " in line for line in candidates)

        ctx = Context()
        score = ctx.cell(0, type_tag="i64")
        name = ctx.cell("ada", type_tag="string")
        seen: list[dict[int, object]] = []
        changed = asyncio.Event()

        def on_state(mirror: Mirror) -> None:
            seen.append(mirror.values())
            changed.set()

        async def until(predicate: object) -> None:
            assert callable(predicate)
            while not predicate():
                changed.clear()
                await asyncio.wait_for(changed.wait(), TIMEOUT)

        producer = asyncio.ensure_future(webrtc.publish_context(link_one, "room", ctx))
        resyncs: list[ResyncRequest] = []
        follower = asyncio.ensure_future(
            webrtc.follow(link_two, "room", on_state, on_resync=resyncs.append)
        )
        try:
            await until(lambda: bool(seen))
            assert seen[0] == {score.id: 0, name.id: "ada"}
            for value in range(1, 6):
                score.set(value)
            await until(lambda: seen[-1][score.id] == 5)
            epochs = len(seen)
            # a delta that does not follow: the follower asks for a resync, and gets one
            link_one.send(wire_json.encode(Delta(base_epoch=999, epoch=1000)))
            name.set("grace")
            await until(lambda: seen[-1].get(name.id) == "grace" and len(seen) > epochs)
            assert seen[-1] == {score.id: 5, name.id: "grace"}
        finally:
            producer.cancel()
            await link_one.close()
            await link_two.close()
            await asyncio.wait_for(follower, TIMEOUT)
        assert [r.reason for r in resyncs] == ["EpochGap"]
