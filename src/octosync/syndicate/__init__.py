"""Syndicate's network protocol, server side and sans-I/O: a relay onto ``dataspace/``.

``relay.Relay`` turns packets (``wire.syndicate``) from many connections into dataspace
operations and packets back; ``sturdy`` signs and checks sturdy refs; ``caveats`` attenuates;
``values`` maps Preserves values and ``dataspacePatterns`` patterns onto the dataspace's.
"""

from octosync.syndicate.relay import Relay, error_packet
from octosync.syndicate.sturdy import mint, mint_text

__all__ = ["Relay", "error_packet", "mint", "mint_text"]
