"""Log a recurring problem once per interval with a count, never once per occurrence.

A flood of bad input, or accept() failing for want of descriptors, must not turn into one
traceback per event (tens of megabytes of log). The first occurrence of each message is logged
with its traceback; later ones in the same interval are counted and reported once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class ThrottledLog:
    def __init__(
        self,
        logger: logging.Logger,
        *,
        interval: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.interval = interval
        self._clock = clock
        self._windows: dict[str, tuple[float, int]] = {}
        """message -> (start of its current window, occurrences suppressed in it)"""

    def exception(self, message: str, exc: BaseException | None = None) -> bool:
        """Log ``message`` (with ``exc``'s traceback) unless it was logged this interval.

        Returns True when something was written.
        """
        now = self._clock()
        window = self._windows.get(message)
        if window is not None and now - window[0] < self.interval:
            self._windows[message] = (window[0], window[1] + 1)
            return False
        suppressed = 0 if window is None else window[1]
        self._windows[message] = (now, 0)
        suffix = f" ({suppressed} more since the last report)" if suppressed else ""
        self.logger.error("%s%s", message, suffix, exc_info=exc)
        return True
