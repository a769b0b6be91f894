"""A real syndicate-py program, run as its own process by the interop tests.

``python syndicate_peer.py MODE ADDRESS STURDYREF [NAME]``: ADDRESS is a syndicate-py transport
address (``<tcp "127.0.0.1" PORT>`` or ``<ws "ws://127.0.0.1:PORT/dataspace">``, ``wss://`` for
TLS), or ``tls:<tcp ...>`` for TCP with TLS (both trust the system's CAs and ``SSL_CERT_FILE``).
It only uses syndicate-py's public API, as any Syndicate program would (for ``tls:``, its TCP
relay given a TLS socket), and prints one JSON line per event:

- ``presence NAME``: asserts ``<Present NAME>``, prints ``["+", who]`` / ``["-", who]`` for every
  ``<Present who>`` it sees come and go.
- ``observe``: observes ``<Point $x 1 $z>`` (+/- with the captures) and ``<Ping $n>`` messages
  (``["!", n]``); prints ``["ready"]`` once a sync confirms both observers are installed.
- ``publish``: asserts four records (two match ``observe``'s pattern), sends three messages (two
  match), syncs (``["synced"]``), retracts one matching record and syncs again (``["done"]``).
- ``resolve``: prints ``["accepted"]`` or ``["rejected", detail]`` for the sturdy ref.
"""

from __future__ import annotations

import json
import ssl
import sys
from typing import Any

from syndicate import Record, Symbol, actor, gatekeeper, parse, relay, transport, turn
from syndicate import patterns as P
from syndicate.dataspace import during, on_message
from syndicate.during import During
from syndicate.schema import gatekeeper as gk_schema
from syndicate.schema import transportAddress


def out(*items: Any) -> None:
    print(json.dumps(items), flush=True)


def Present(who: str) -> Record:
    return Record(Symbol("Present"), [who])


def Point(x: int, y: int, z: str) -> Record:
    return Record(Symbol("Point"), [x, y, z])


def run_presence(ds: Any, name: str) -> None:
    turn.publish(ds, Present(name))

    @during(ds, P.rec("Present", P.CAPTURE))
    def seen(who: str) -> Any:
        out("+", who)
        return lambda: out("-", who)


def run_observe(ds: Any) -> None:
    @during(ds, P.rec("Point", P.CAPTURE, P.lit(1), P.CAPTURE))
    def point(x: int, z: str) -> Any:
        out("+", x, z)
        return lambda: out("-", x, z)

    @on_message(ds, P.rec("Ping", P.CAPTURE))
    def ping(n: int) -> None:
        out("!", n)

    turn.sync(ds, lambda: out("ready"))


def run_publish(ds: Any) -> None:
    first = turn.publish(ds, Point(1, 1, "a"))
    turn.publish(ds, Point(2, 2, "b"))
    turn.publish(ds, Point(3, 1, "c"))
    turn.publish(ds, Record(Symbol("Other"), [1, 1, "d"]))
    turn.send(ds, Record(Symbol("Ping"), [1]))
    turn.send(ds, Record(Symbol("Pong"), [2]))
    turn.send(ds, Record(Symbol("Ping"), [3]))

    def synced() -> None:
        out("synced")
        turn.retract(first)
        turn.sync(ds, lambda: out("done"))

    turn.sync(ds, synced)


def tcp_with_tls() -> None:
    """syndicate-py's TCP transport has no TLS: the same relay, its socket wrapped in TLS."""
    context = ssl.create_default_context()

    class TlsTcpTunnelRelay(relay.TcpTunnelRelay):  # type: ignore[misc]
        async def _create_connection(self, system: Any) -> Any:
            address = self.address
            return await system.loop.create_connection(
                lambda: self, address.host, address.port, ssl=context
            )

    transport.address(transportAddress.Tcp)(TlsTcpTunnelRelay)


def connect(address: str, cap_text: str, on_resolved: Any) -> None:
    """Run an actor that resolves sturdy ref ``cap_text`` at ``address`` through syndicate-py's
    own relay and gatekeeper protocol; ``on_resolved(ds)`` with the dataspace, or prints
    ``["rejected", detail]``."""
    cap = parse(cap_text)

    @actor.run_system(name="peer", configure_logging=False)
    def boot() -> None:
        @During().add_handler
        def on_gatekeeper(gk: Any) -> None:
            @gatekeeper._resolve(gk.embeddedValue, cap)
            @During().add_handler
            def on_answer(r: Any) -> None:
                resolved = gk_schema.Resolved.decode(r)
                if resolved.VARIANT.name != "accepted":
                    out("rejected", str(resolved.value.detail))
                    return
                on_resolved(resolved.responderSession)

        relay.TunnelRelay.from_str(address, gatekeeper_peer=turn.ref(on_gatekeeper))


def main() -> None:
    mode, address, cap_text = sys.argv[1:4]
    if address.startswith("tls:"):
        address = address.removeprefix("tls:")
        tcp_with_tls()
    name = sys.argv[4] if len(sys.argv) > 4 else ""

    def on_resolved(ds: Any) -> None:
        if mode == "resolve":
            out("accepted")
        elif mode == "presence":
            run_presence(ds, name)
        elif mode == "observe":
            run_observe(ds)
        elif mode == "publish":
            run_publish(ds)

    connect(address, cap_text, on_resolved)


if __name__ == "__main__":
    main()
