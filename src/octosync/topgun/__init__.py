"""TopGun face rules, sans-I/O: maps, write concerns, fan-out, sync, topics, locks, counters.

The session in ``server/topgun_session.py`` feeds decoded ``wire.topgun`` messages to
:class:`TopGunCore` and moves the bytes it returns; nothing here reads a clock (injected), a
socket or a file. This package sits above ``wire/`` and ``store/records`` (it speaks their
messages and validates journal records before it changes state) and below ``server/``.
"""

from octosync.topgun.core import Effects, Grants, Outbound, TopGunCore

__all__ = ["Effects", "Grants", "Outbound", "TopGunCore"]
