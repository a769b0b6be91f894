"""The whole protocol under random histories: devices emit, crash and reconnect; links crash and
rejoin; every queue is FIFO but delivery between queues is in any order hypothesis picks.

Safety is checked after every step (logs nest, sequencers are never reused); the issue's
invariants are checked whenever the chain settles: every acknowledged event consumed exactly
once, all links hold the same state and log, every device sees the chain's state.
"""

from __future__ import annotations

import itertools
import json

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from octosync.chain.device import Phase
from tests.chain.sim import Sim

DEVICES = ("d0", "d1", "d2")
device_names = st.sampled_from(DEVICES)
moves = st.sampled_from(["join", "move", "score", "wave"])


class ChainMachine(RuleBasedStateMachine):
    @initialize(links=st.integers(1, 3))
    def start(self, links: int) -> None:
        self.sim = Sim(links)
        self.counter = 0
        for device in DEVICES:
            self.sim.add_device(device)
            self.sim.connect(device)

    @rule(device=device_names, name=moves, amount=st.integers(-3, 3))
    def emit(self, device: str, name: str, amount: int) -> None:
        self.counter += 1
        payload = {"name": device, "dx": amount, "dy": -amount, "points": amount, "n": self.counter}
        self.sim.emit(device, name, json.dumps(payload))

    @rule(data=st.data())
    def deliver(self, data: st.DataObject) -> None:
        keys = self.sim.pending()
        if keys:
            self.sim.deliver(data.draw(st.sampled_from(keys)))

    @rule(data=st.data(), count=st.integers(1, 20))
    def deliver_many(self, data: st.DataObject, count: int) -> None:
        for _ in range(count):
            keys = self.sim.pending()
            if not keys:
                return
            self.sim.deliver(data.draw(st.sampled_from(keys)))

    @rule()
    def compute(self) -> None:
        self.sim.compute()

    @precondition(lambda self: len(self.sim.order) > 1)
    @rule(data=st.data())
    def crash_link(self, data: st.DataObject) -> None:
        self.sim.crash_link(data.draw(st.sampled_from(self.sim.order)))

    @precondition(lambda self: len(self.sim.order) < 4)
    @rule()
    def add_link(self) -> None:
        self.sim.add_link()

    @rule(device=device_names)
    def checkpoint(self, device: str) -> None:
        self.sim.checkpoint(device)

    @rule(device=device_names, mode=st.sampled_from(["latest", "checkpoint", "lost"]))
    def crash_device(self, device: str, mode: str) -> None:
        restore = {
            "latest": self.sim.devices[device].machine(),
            "checkpoint": self.sim.checkpoints.get(device),
            "lost": None,
        }[mode]
        self.sim.crash_device(device, restore=restore)

    @rule(device=device_names)
    def lose_socket(self, device: str) -> None:
        self.sim.drop_connection(device)

    @rule(device=device_names)
    def reconnect(self, device: str) -> None:
        if self.sim.devices[device].phase is Phase.DISCONNECTED:
            self.sim.connect(device)

    @rule()
    def settle_and_check(self) -> None:
        self.sim.settle()
        self.sim.check_settled()

    @invariant()
    def logs_nest(self) -> None:
        """Downstream holds a subset of upstream's events and at least its state."""
        links = [self.sim.links[name] for name in self.sim.order]
        for link in links:
            assert list(link.events) == list(range(link.trim, link.next_chain))
        for up, down in itertools.pairwise(links):
            assert up.next_state <= down.next_state
            for c, e in down.events.items():
                if c >= up.trim:
                    held = up.events[c]
                    assert (held.device, held.device_sequencer, held.payload) == (
                        e.device,
                        e.device_sequencer,
                        e.payload,
                    )

    def teardown(self) -> None:
        if hasattr(self, "sim"):
            self.sim.settle()
            self.sim.check_settled()


ChainMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=50, deadline=None)
TestChainMachine = ChainMachine.TestCase
