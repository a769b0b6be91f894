"""What the effect authority decides, sans-I/O: the lease rule and the idempotency rule.

Lease: one named lease, held by one holder until ``expires``. Acquiring a free or expired
lease, or one held by someone else that expired, starts a new term with the next fencing
token; the holder renews within its term (same token). Every write the authority makes (an
intent, an outcome) names the token it holds and is refused (``LeaseLost``) unless that token
is still the current one and unexpired, so a holder that paused past its term can no longer
record anything, and an effect's target that keeps the highest token it has seen can refuse
its late calls too.

Idempotency: per effect key, no record means "never tried" (fire); ``intent`` means a holder
recorded that it was about to fire and never recorded the outcome (in doubt: ask the target
before firing again); ``done`` means it fired (skip).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from octosync.errors import LeaseLost


@dataclass(frozen=True, slots=True)
class Lease:
    holder: str
    token: int
    expires: float


class Decision(Enum):
    FIRE = "fire"
    SKIP = "skip"
    IN_DOUBT = "in_doubt"


class State(Enum):
    INTENT = "intent"
    DONE = "done"


def acquire(current: Lease | None, holder: str, ttl: float, now: float) -> Lease | None:
    """The lease after ``holder`` asks for it (None: someone else holds it)."""
    if current is not None and current.holder == holder and current.expires > now:
        return Lease(holder, current.token, now + ttl)
    if current is not None and current.expires > now:
        return None
    return Lease(holder, (current.token if current else 0) + 1, now + ttl)


def check_held(current: Lease | None, mine: Lease, now: float) -> None:
    """``LeaseLost`` unless ``mine`` is the current, unexpired term."""
    if current is None or current.token != mine.token or current.holder != mine.holder:
        who = "nobody" if current is None else f"{current.holder!r} (token {current.token})"
        raise LeaseLost(f"token {mine.token} is stale: the lease is held by {who}", path="token")
    if current.expires <= now:
        raise LeaseLost(f"the lease of token {mine.token} expired", path="expires")


def decide(record: State | None) -> Decision:
    if record is None:
        return Decision.FIRE
    return Decision.SKIP if record is State.DONE else Decision.IN_DOUBT
