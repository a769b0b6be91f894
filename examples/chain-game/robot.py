"""A Python player for the chain game: it joins and walks towards the coin, one square per
move, each move sent once the chain has applied the one before (``--moves N`` stops after N).

It is a chain device like the browser's, over TCP to the chain's head (found in NATS).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from octosync.errors import OctosyncError
from octosync.links.config_store import ConfigStore
from octosync.links.device import ChainDevice


def step(me: dict[str, int], coin: dict[str, int]) -> dict[str, int]:
    sign = lambda d: (d > 0) - (d < 0)  # noqa: E731
    return {"dx": sign(coin["x"] - me["x"]), "dy": sign(coin["y"] - me["y"])}


async def settled(device: ChainDevice) -> dict[str, Any]:
    """The state once the chain has consumed every event this device sent."""
    while not device.live or device.client.events:
        device.changed.clear()
        await device.changed.wait()
    return device.client.state or {}


async def main(config: str, chain: str, name: str, moves: int | None, every: float) -> None:
    configs = await ConfigStore(config, chain).open(create=False)
    device = ChainDevice(name, configs=configs)
    device.start()
    try:
        device.emit("join", json.dumps({"name": name}))
        made = 0
        while moves is None or made < moves:
            state = await settled(device)
            device.emit("move", json.dumps(step(state["players"][name], state["coin"])))
            made += 1
            await asyncio.sleep(every)
        me = (await settled(device))["players"][name]
        print(f"{name} at {me['x']},{me['y']} with {me['score']} coins", flush=True)
        await asyncio.Event().wait()  # stays in the game until stopped
    finally:
        await device.stop()
        await configs.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", default="nats://127.0.0.1:4222", help="the chain's NATS")
    parser.add_argument("--chain", default="game", help="the chain's name (game)")
    parser.add_argument("--name", default="robot", help="the player's name (robot)")
    parser.add_argument("--moves", type=int, default=None, help="stop moving after N moves")
    parser.add_argument("--every", type=float, default=1.0, help="seconds between moves (1)")
    args = parser.parse_args()
    try:
        asyncio.run(main(args.config, args.chain, args.name, args.moves, args.every))
    except OctosyncError as exc:
        sys.exit(f"robot: {exc}; this game's chain is started by examples/chain-game/chain.py")
    except KeyboardInterrupt:
        pass
