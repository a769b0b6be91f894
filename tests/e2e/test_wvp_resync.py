"""WVP's consumer side over real sockets: a follower verifies state hashes, a mismatch goes
back as a resync request through the hub to the producer, whose snapshot repairs it; a
producer hands its warp to another connection."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from octosync.client.wvp import WvpClient
from octosync.errors import Desync, ForbiddenPublish, SnapshotRequired
from octosync.warp import graph as g
from octosync.warp.consumer import Phase, WarpProducer
from octosync.wire import wvp
from tests.e2e.helpers import TIMEOUT, serve


async def test_a_hash_mismatch_is_desync_and_the_producer_resyncs_the_follower(
    tmp_path: Path,
) -> None:
    async with serve(tmp_path) as srv:
        url = f"{srv.ws_url}/wvp"
        async with WvpClient(url) as prod, WvpClient(url) as viewer:
            view = await viewer.follow(1)
            await asyncio.sleep(0.05)
            producer = WarpProducer()
            await prod.publish(1, producer.snapshot())
            await prod.publish(1, producer.diff([g.add_node(1, b"a")]))
            for _ in range(2):
                await viewer.receive(TIMEOUT)
            assert (view.epoch, view.verified) == (1, 2)
            honest = producer.diff([g.add_node(2, b"b")])
            await prod.publish(1, wvp.WarpDiff(1, 2, honest.ops, bytes(32)))  # a wrong hash
            with pytest.raises(Desync):
                await viewer.receive(TIMEOUT)
            assert view.phase is Phase.DESYNCED
            asked = await prod.receive(TIMEOUT)
            assert asked == wvp.ResyncRequest(warp_id=1, epoch=1, reason="Desync")
            await prod.answer_resync(1, producer)
            await viewer.receive(TIMEOUT)
            assert (view.phase, view.epoch) == (Phase.LIVE, 2)
            assert view.graph == producer.graph


async def test_without_a_producer_the_hub_replays_its_state(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv:
        url = f"{srv.ws_url}/wvp"
        producer = WarpProducer()
        async with WvpClient(url) as prod:
            await prod.publish(2, producer.snapshot())
            await prod.publish(2, producer.diff([g.add_node(1)]))
        async with WvpClient(url) as viewer:
            view = await viewer.follow(2)
            for _ in range(2):
                await viewer.receive(TIMEOUT)
            await viewer.request_resync(2, view.epoch, "test")
            again = await viewer.receive(TIMEOUT)
            assert isinstance(again, wvp.WarpStream)
            assert isinstance(again.frame, wvp.WarpSnapshot)
            await viewer.receive(TIMEOUT)
            assert view.graph == producer.graph


async def test_a_producer_hands_its_warp_over(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv:
        url = f"{srv.ws_url}/wvp"
        async with WvpClient(url) as a, WvpClient(url) as b, WvpClient(url) as viewer:
            view = await viewer.follow(4)
            await asyncio.sleep(0.05)
            producer = WarpProducer()
            await a.publish(4, producer.snapshot())
            await viewer.receive(TIMEOUT)
            await a.hand_over(4, b.session_id)
            await a.publish(4, producer.diff([g.add_node(1)]))
            with pytest.raises(ForbiddenPublish):
                await a.receive(TIMEOUT)
            producer.graph.apply_op(g.remove_node(1))  # what a sent was refused
            producer.epoch -= 1
            await b.publish(4, producer.diff([g.add_node(7)]))
            with pytest.raises(SnapshotRequired):
                await b.receive(TIMEOUT)
            await b.publish(4, producer.snapshot())
            await b.publish(4, producer.diff([g.add_node(8)]))
            for _ in range(2):
                await viewer.receive(TIMEOUT)
            assert (view.phase, view.epoch, sorted(view.graph.nodes)) == (Phase.LIVE, 2, [7, 8])


async def test_the_hub_refuses_a_frame_whose_hash_disagrees(tmp_path: Path) -> None:
    async with serve(tmp_path, verify_warp_hashes=True) as srv:
        url = f"{srv.ws_url}/wvp"
        async with WvpClient(url) as prod, WvpClient(url) as viewer:
            view = await viewer.follow(6)
            await asyncio.sleep(0.05)
            producer = WarpProducer()
            await prod.publish(6, producer.snapshot())
            honest = producer.diff([g.add_node(1, b"x")])
            await prod.publish(6, wvp.WarpDiff(0, 1, honest.ops, bytes(32)))
            with pytest.raises(Desync) as refused:
                await prod.receive(TIMEOUT)
            assert refused.value.path == "state_hash"
            await prod.publish(6, honest)
            for _ in range(2):
                await viewer.receive(TIMEOUT)
            assert (view.phase, view.epoch, view.verified) == (Phase.LIVE, 1, 2)
