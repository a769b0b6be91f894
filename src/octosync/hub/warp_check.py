"""The hub's own check of WVP state hashes (``[hub] verify_warp_hashes``).

A WVP stream's graphs and ops are relayed as the producer's raw CBOR, but when the producer
speaks the reference render graph the hub can follow it: ``WarpCheck`` keeps the warp's
``RenderGraph``, applies each accepted frame and compares the frame's ``state_hash`` with its
own before the frame is accepted, so a producer that disagrees with itself is refused
(``Desync``) instead of desyncing every subscriber. A stream whose graph is not the reference
graph is followed no further (its frames without hashes pass as before); a hash on such a
stream is refused, because the hub cannot check it.
"""

from __future__ import annotations

from typing import Any

from octosync.errors import DecodeError, Desync, OctosyncError
from octosync.warp.graph import RenderGraph


def _plain(value: Any) -> Any:
    return value.value() if hasattr(value, "value") and callable(value.value) else value


class WarpCheck:
    """One warp's graph as the hub follows it; ``None`` graph: not the reference graph."""

    __slots__ = ("graph",)

    def __init__(self) -> None:
        self.graph: RenderGraph | None = None

    def snapshot(self, graph: Any, state_hash: bytes | None) -> RenderGraph | None:
        """The graph this snapshot sets (checked), without changing anything yet."""
        try:
            candidate: RenderGraph | None = RenderGraph.from_plain(_plain(graph))
        except OctosyncError:
            candidate = None
        self._check(candidate, state_hash)
        return candidate

    def diff(self, ops: Any, state_hash: bytes | None) -> RenderGraph | None:
        """The graph after this diff's ops (checked), without changing anything yet."""
        if self.graph is None:
            self._check(None, state_hash)
            return None
        after = self.graph.copy()
        try:
            after.apply_ops(_plain(ops))
        except DecodeError as exc:
            raise Desync(
                f"the diff's ops do not apply to the render graph: {exc.message}",
                path=f"ops.{exc.path}",
            ) from exc
        self._check(after, state_hash)
        return after

    @staticmethod
    def _check(graph: RenderGraph | None, state_hash: bytes | None) -> None:
        if state_hash is None:
            return
        if graph is None:
            raise Desync(
                "a state_hash on a warp whose graph is not the reference render graph: "
                "the hub cannot check it",
                path="state_hash",
            )
        graph.check_hash(state_hash, "the hub's render graph")
