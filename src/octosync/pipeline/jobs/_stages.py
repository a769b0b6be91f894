"""Stage bookkeeping shared by the jobs: progress lines and failures that name input and stage."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from octosync.errors import OctosyncError, PipelineError

Progress = Callable[[str], None]


def stderr_progress(job: str) -> Progress:
    start = time.monotonic()

    def say(message: str) -> None:
        print(f"[{job} +{time.monotonic() - start:6.1f}s] {message}", file=sys.stderr, flush=True)

    return say


def quiet(_: str) -> None:
    """A progress sink that says nothing (tests, library use)."""


@contextmanager
def stage(name: str, source: Path, progress: Progress) -> Iterator[None]:
    """Run one stage; any failure becomes a ``PipelineError`` naming the stage and the input."""
    progress(f"{name} ...")
    try:
        yield
    except PipelineError:
        raise
    except OctosyncError as exc:
        raise PipelineError(f"stage '{name}' failed: {exc}", path=str(source)) from exc
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PipelineError(f"stage '{name}' failed: {first}", path=str(source)) from exc
