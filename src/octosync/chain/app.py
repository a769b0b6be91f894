"""Load the application's ``compute`` by dotted path (``package.module:function``).

The computation belongs to the application: a deterministic function of the state and the
events it is offered, returning a ``StateChange``. Links name it on the command line
(``--app``), so every link of a chain runs the same code and a new tail can take over.
"""

from __future__ import annotations

import importlib
from typing import cast

from octosync.chain.link import Compute
from octosync.errors import LocalProtocolError

EXAMPLE_APP = "octosync.chain.game:compute"


def load_app(spec: str) -> Compute:
    """The callable named by ``module:attribute``; ``LocalProtocolError`` naming what failed."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise LocalProtocolError(f"app {spec!r} is not of the form module:function", path="app")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise LocalProtocolError(f"cannot import {module_name!r}: {exc}", path="app") from None
    target: object = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise LocalProtocolError(f"{module_name!r} has no {attribute!r}", path="app") from None
    if not callable(target):
        raise LocalProtocolError(f"{spec!r} is not callable", path="app")
    return cast(Compute, target)
