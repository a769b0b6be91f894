"""TopGun face rules, sans-I/O: maps, write concerns, fan-out, sync, topics, locks, counters.

The session in ``server/topgun_session.py`` feeds decoded ``wire.topgun`` messages to
:class:`TopGunCore` and carries out the typed effects it returns (``topgun.effects``: the
server encodes the messages, ``server/topgun_wire.py``, and runs any time bound); nothing here
reads a clock (injected), starts a timer, or touches a socket or a file. This package sits
above ``wire/`` and ``store/records`` (it speaks their messages, and validates and encodes
journal records before it changes state: the encoding is the check) and below ``server/``.
"""

from octosync.topgun.core import Effects, Grants, Outbound, TopGunCore

__all__ = ["Effects", "Grants", "Outbound", "TopGunCore"]
