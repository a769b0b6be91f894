"""Hypothesis strategies and stateful-machine bases for checking CRDTs (used by the tests).

Shipped with the package, as xotl.crdt does, so any replica type can be checked for
convergence by subclassing :class:`ReplicaMachine`. Importing this needs ``hypothesis``.
"""

from octosync.crdt.testing.machines import ReplicaMachine
from octosync.crdt.testing.strategies import op_histories, op_records, timestamps

__all__ = ["ReplicaMachine", "op_histories", "op_records", "timestamps"]
