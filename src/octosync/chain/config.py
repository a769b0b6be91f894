"""The chain's configuration: ordered members and an epoch, changed only by compare-and-set.

Pure: the transitions here build the next configuration; ``config_store`` writes it with the
revision it was derived from, so two links removing the same dead member cannot both win.
"""

from __future__ import annotations

import msgspec


class Member(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    id: str
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


class ChainConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    members: tuple[Member, ...] = ()
    epoch: int = 0

    def ids(self) -> list[str]:
        return [m.id for m in self.members]

    def member(self, member_id: str) -> Member | None:
        return next((m for m in self.members if m.id == member_id), None)

    def predecessor(self, member_id: str) -> Member | None:
        i = self.ids().index(member_id)
        return self.members[i - 1] if i > 0 else None

    def successor(self, member_id: str) -> Member | None:
        i = self.ids().index(member_id)
        return self.members[i + 1] if i + 1 < len(self.members) else None

    @property
    def head(self) -> Member | None:
        return self.members[0] if self.members else None

    @property
    def tail(self) -> Member | None:
        return self.members[-1] if self.members else None

    def without(self, member_id: str) -> ChainConfig:
        kept = tuple(m for m in self.members if m.id != member_id)
        return ChainConfig(kept, self.epoch + 1)

    def with_tail(self, member: Member) -> ChainConfig:
        kept = tuple(m for m in self.members if m.id != member.id)
        return ChainConfig((*kept, member), self.epoch + 1)
