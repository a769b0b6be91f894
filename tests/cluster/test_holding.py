"""Which shared documents a node holds: a model of members, loads and the clock, against
``Holdings`` (and the subject-safe names of documents)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from octosync.cluster.holding import Holdings, HoldTiming, Load, Phase, Release, name_of, token
from octosync.errors import DecodeError

IDLE = 5.0
LOAD_TIMEOUT = 3.0
DOCS = st.sampled_from(["a", "b", "c"])
CONNS = st.integers(1, 4)


class HoldingMachine(RuleBasedStateMachine):
    """The model: per document, its members, whether a load is under way or done, and when it
    went idle or started loading. Every decision of ``Holdings`` is checked against it."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.holdings = Holdings(lambda: self.now, HoldTiming(IDLE, LOAD_TIMEOUT))
        self.members: dict[str, set[int]] = {}
        self.loading: dict[str, float] = {}  # name -> when the load started
        self.idle_since: dict[str, float] = {}  # loaded, no member: since when
        self.loaded: set[str] = set()
        self.busy: set[str] = set()
        self.loads = 0
        self.releases = 0
        self.failures = 0

    def _held(self, name: str) -> bool:
        return name in self.loading or name in self.loaded

    @rule(conn=CONNS, name=DOCS)
    def join(self, conn: int, name: str) -> None:
        expect_load = not self._held(name)
        got = self.holdings.joined(conn, name)
        assert got == (Load(name) if expect_load else None)
        self.members.setdefault(name, set()).add(conn)
        if expect_load:
            self.loads += 1
            self.loading[name] = self.now
        self.idle_since.pop(name, None)

    @rule(conn=CONNS, name=DOCS)
    def leave(self, conn: int, name: str) -> None:
        self.holdings.left(conn, name)
        if not self._held(name):
            return
        members = self.members.get(name, set())
        members.discard(conn)
        if not members and name in self.loaded and name not in self.idle_since:
            self.idle_since[name] = self.now

    @rule(name=DOCS)
    def load_ends(self, name: str) -> None:
        was_loading = name in self.loading
        assert self.holdings.loaded(name) == was_loading
        if was_loading:
            del self.loading[name]
            self.loaded.add(name)
            if not self.members.get(name):
                self.idle_since[name] = self.now

    @rule(name=DOCS)
    def load_fails(self, name: str) -> None:
        got = self.holdings.failed(name)
        if name in self.loading:
            assert got == Release(name, failed=True)
            self._gone(name)
            self.failures += 1
        else:
            assert got is None

    @rule(name=DOCS, busy=st.booleans())
    def writes_in_flight(self, name: str, busy: bool) -> None:
        (self.busy.add if busy else self.busy.discard)(name)

    @rule(seconds=st.sampled_from([0.5, 1.0, 2.5, 4.0, 6.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        due = self.holdings.due(busy=lambda name: name in self.busy)
        want: list[Release] = []
        for name in sorted({*self.loading, *self.loaded}):
            if name in self.loading and self.now - self.loading[name] >= LOAD_TIMEOUT:
                want.append(Release(name, failed=True))
                self.failures += 1
            elif name in self.idle_since and self.now - self.idle_since[name] >= IDLE:
                if name in self.busy:
                    self.idle_since[name] = self.now
                else:
                    want.append(Release(name))
                    self.releases += 1
        for release in want:
            self._gone(release.name)
        assert due == want

    def _gone(self, name: str) -> None:
        self.loading.pop(name, None)
        self.idle_since.pop(name, None)
        self.loaded.discard(name)
        self.members.pop(name, None)

    @invariant()
    def agrees(self) -> None:
        h = self.holdings
        assert h.loading() == sorted(self.loading)
        assert h.held() == sorted(self.loaded)
        for name in ["a", "b", "c"]:
            assert h.ready(name) == (name in self.loaded)
            if name in self.loaded:
                want = Phase.IDLE if name in self.idle_since else Phase.HELD
                assert h.phase(name) is want
                assert h.members(name) == frozenset(self.members.get(name, set()))
            # a document with members is never let go by the clock, only by a failed load
            if self.members.get(name) and name in self.loaded:
                assert h.phase(name) is Phase.HELD
        assert (h.stats.loads, h.stats.releases, h.stats.load_failures) == (
            self.loads,
            self.releases,
            self.failures,
        )


TestHolding = HoldingMachine.TestCase


def test_a_member_back_within_the_idle_time_keeps_the_document_without_a_load() -> None:
    now = [0.0]
    h = Holdings(lambda: now[0], HoldTiming(idle=10.0, load_timeout=2.0))
    assert h.joined(1, "doc") == Load("doc")
    assert not h.ready("doc")
    assert h.loaded("doc")
    h.left(1, "doc")
    now[0] = 9.0
    assert h.due() == []
    assert h.joined(2, "doc") is None  # still held: no load
    now[0] = 30.0
    assert h.due() == []  # it has a member
    h.left(2, "doc")
    now[0] = 39.0
    assert h.due() == []
    now[0] = 40.0
    assert h.due() == [Release("doc")]
    assert h.joined(3, "doc") == Load("doc")  # let go: the next member loads it again


@given(st.text(min_size=1, max_size=200))
def test_a_document_token_is_one_subject_token_and_gives_the_name_back(name: str) -> None:
    tok = token(name)
    assert tok
    assert all(c.isascii() and (c.isalnum() or c in "-_") for c in tok)
    assert name_of(tok) == name


def test_a_token_that_is_not_one_is_a_decode_error() -> None:
    with pytest.raises(DecodeError) as err:
        name_of("%%%")
    assert err.value.path == "subject"
