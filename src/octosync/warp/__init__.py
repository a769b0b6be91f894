"""WARP streams as WVP's reference tools see them, sans-I/O: the render graph, its state
hash, the per-``WarpId`` consumer state machine and the producer's frames."""

from octosync.warp.consumer import Phase, WarpConsumer, WarpProducer
from octosync.warp.graph import Edge, Node, RenderGraph

__all__ = ["Edge", "Node", "Phase", "RenderGraph", "WarpConsumer", "WarpProducer"]
