"""Device credentials in their SQLite file: present-or-mint as a state machine over the real
file, reopened (a restart) between steps, with clients that lose, copy and corrupt tokens."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from octosync.errors import StorageError
from octosync.refresh.device_tokens import SECRET_BYTES, Minted, mint
from octosync.store.device_credentials import FILE_NAME, DeviceCredentials

PER_OWNER = 3
SUBJECTS = [None, "ann", "bo"]
CLIENTS = range(4)


@dataclass
class Held:
    """What a client's storage keeps, as TopGun's client keeps it."""

    device_id: str | None = None
    token: str | None = None


@dataclass
class Counter:
    n: int = 0
    minted: list[Minted] = field(default_factory=list)

    def fresh(self) -> Minted:
        self.n += 1
        minted = mint(uuid.UUID(int=self.n), self.n.to_bytes(SECRET_BYTES, "big"))
        self.minted.append(minted)
        return minted


class DeviceMachine(RuleBasedStateMachine):
    """The model: each owner's device ids, least recently seen first (at most ``PER_OWNER``),
    and which owner and device each minted token stands for. A presented token re-binds iff
    it was minted for the presenting owner and its device is still kept."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp())
        self.store = DeviceCredentials(self.dir, per_owner=PER_OWNER)
        self.counter = Counter()
        self.owners: dict[str | None, list[str]] = {s: [] for s in SUBJECTS}
        self.issued: dict[str, tuple[str | None, str]] = {}
        self.clients = {c: Held() for c in CLIENTS}

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir)

    @rule(client=st.sampled_from(CLIENTS), subject=st.sampled_from(SUBJECTS))
    def connect(self, client: int, subject: str | None) -> None:
        held = self.clients[client]
        binding = self.store.present_or_mint(subject, held.token, self.counter.fresh)
        kept = self.owners[subject]
        stands_for = self.issued.get(held.token or "")
        if stands_for is not None and stands_for[0] == subject and stands_for[1] in kept:
            assert binding.token is None
            assert binding.device_id == held.device_id == stands_for[1]
            kept.remove(binding.device_id)
        else:
            assert binding.token is not None
            assert binding.device_id not in {d for ids in self.owners.values() for d in ids}
            self.issued[binding.token] = (subject, binding.device_id)
            held.token = binding.token
            del kept[: max(0, len(kept) + 1 - PER_OWNER)]
        kept.append(binding.device_id)
        held.device_id = binding.device_id

    @rule(thief=st.sampled_from(CLIENTS), victim=st.sampled_from(CLIENTS))
    def copy_credential(self, thief: int, victim: int) -> None:
        held = self.clients[victim]
        self.clients[thief] = Held(held.device_id, held.token)

    @rule(client=st.sampled_from(CLIENTS), junk=st.text(max_size=200))
    def corrupt(self, client: int, junk: str) -> None:
        self.clients[client].token = junk

    @rule(client=st.sampled_from(CLIENTS))
    def lose_storage(self, client: int) -> None:
        self.clients[client] = Held()

    @rule()
    def restart(self) -> None:
        self.store.close()
        self.store = DeviceCredentials(self.dir, per_owner=PER_OWNER)

    @invariant()
    def each_owner_keeps_its_most_recently_seen(self) -> None:
        for subject, kept in self.owners.items():
            assert self.store.devices(subject) == kept[::-1]


TestDeviceMachine = DeviceMachine.TestCase
TestDeviceMachine.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)


def test_the_file_holds_no_token_or_secret(tmp_path: Path) -> None:
    store = DeviceCredentials(tmp_path)
    counter = Counter()
    binding = store.present_or_mint("ann", None, counter.fresh)
    store.close()
    assert binding.token is not None
    secret = binding.token.partition(".")[2]
    raw = (tmp_path / FILE_NAME).read_bytes()
    assert binding.token.encode() not in raw
    assert secret.encode() not in raw
    assert bytes.fromhex(secret) not in raw
    assert counter.minted[0].secret_hash in raw


def test_a_binding_that_cannot_be_stored_fails_and_keeps_nothing(tmp_path: Path) -> None:
    store = DeviceCredentials(tmp_path)
    counter = Counter()
    store.present_or_mint("ann", None, counter.fresh)
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count = {pages}")  # the disk is full from here on

    def mint_until_a_page_is_needed() -> None:
        for _ in range(200):
            store.present_or_mint("ann", None, counter.fresh)

    with pytest.raises(StorageError, match="cannot bind the device"):
        mint_until_a_page_is_needed()
    kept = store.devices("ann")
    assert counter.minted[-1].device_id not in kept  # the failed mint was rolled back
    store.close()
