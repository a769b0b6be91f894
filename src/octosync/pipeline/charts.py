"""The report's charts: rates over time on a real UTC axis, partial buckets marked.

Times arrive as milliseconds since the epoch (UTC) and become datetimes here, once, with the
unit stated (``_utc``), so the axis shows the data's own dates. Counts come per UTC minute;
a chart uses minutes unless the range needs more than ``MAX_BUCKETS`` of them (one op with an
old HLC can stretch a range over years), then the smallest wider bucket of ``BUCKETS`` that
fits. The first and last buckets are usually only partly covered by the data: their rate is
taken over the covered seconds (never shown as a drop) and they are drawn hollow, labelled
"partial". The legend sits outside the plot area, so it never hides a line. No Spark here:
pandas tables in, PNG out.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

MINUTE_MS = 60_000
BUCKETS: dict[int, str] = {
    MINUTE_MS: "minute",
    5 * MINUTE_MS: "5 minutes",
    15 * MINUTE_MS: "15 minutes",
    60 * MINUTE_MS: "hour",
    6 * 60 * MINUTE_MS: "6 hours",
    24 * 60 * MINUTE_MS: "day",
    7 * 24 * 60 * MINUTE_MS: "week",
    30 * 24 * 60 * MINUTE_MS: "30 days",
    365 * 24 * 60 * MINUTE_MS: "365 days",
}
"""Bucket sizes a chart may use (ms -> name), smallest first; each a multiple of a minute."""
MAX_BUCKETS = 1_500
"""At most this many buckets on one chart (unless even the widest bucket needs more)."""
MIN_COVERED_S = 1.0
"""A rate is never taken over less than a second (one op at one instant is 1/s, not 1000/s)."""


def _utc(millis: float) -> datetime:
    return datetime.fromtimestamp(millis / 1000, tz=UTC)


def utc_text(millis: int) -> str:
    return _utc(millis).strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclass(frozen=True)
class Bucket:
    """One bucket of a time range (``size_ms`` long, from ``bucket_ms``) and the part of it the
    range covers (``[start_ms, end_ms)``)."""

    bucket_ms: int
    start_ms: int
    end_ms: int
    size_ms: int = MINUTE_MS

    @property
    def seconds(self) -> float:
        return (self.end_ms - self.start_ms) / 1000

    @property
    def partial(self) -> bool:
        return self.end_ms - self.start_ms < self.size_ms

    @property
    def middle_ms(self) -> float:
        return (self.start_ms + self.end_ms) / 2


def _first_bucket(first_ms: int, size_ms: int) -> int:
    return first_ms - first_ms % size_ms


def bucket_size(first_ms: int, last_ms: int) -> int:
    """The smallest size of ``BUCKETS`` that covers ``[first_ms, last_ms]`` in at most
    ``MAX_BUCKETS`` buckets (the widest when none does)."""
    for size in BUCKETS:
        if (last_ms - _first_bucket(first_ms, size)) // size + 1 <= MAX_BUCKETS:
            return size
    return max(BUCKETS)


def buckets(first_ms: int, last_ms: int, size_ms: int = MINUTE_MS) -> list[Bucket]:
    """Every bucket from the one holding ``first_ms`` to the one holding ``last_ms``
    (inclusive), each clipped to ``[first_ms, last_ms + 1)``."""
    if last_ms < first_ms:
        raise ValueError(f"time range ends before it starts: {first_ms} > {last_ms}")
    out = []
    at = _first_bucket(first_ms, size_ms)
    while at <= last_ms:
        out.append(Bucket(at, max(at, first_ms), min(at + size_ms, last_ms + 1), size_ms))
        at += size_ms
    return out


def rate_table(counts: Any, by: str, count: str, span: tuple[int, int]) -> Any:
    """``counts`` ``(minute_ms, <by>, <count>)`` summed into the buckets of ``span``
    (``bucket_size``) for every ``by`` value (a bucket without rows is a real 0), with
    ``bucket`` (UTC text), ``bucket_ms``, ``bucket_s`` (its size), ``seconds`` covered,
    ``per_s`` (over the covered seconds) and ``partial``."""
    import pandas as pd

    size = bucket_size(*span)
    spans = buckets(*span, size)
    keys = sorted({str(v) for v in counts[by]}) if len(counts) else []
    found: dict[tuple[int, str], int] = {}
    for m, k, n in zip(counts["minute_ms"], counts[by], counts[count], strict=True):
        at = (int(m) - int(m) % size, str(k))
        found[at] = found.get(at, 0) + int(n)
    rows = []
    for b in spans:
        for key in keys:
            n = found.pop((b.bucket_ms, key), 0)
            rows.append(
                {
                    "bucket": _utc(b.bucket_ms).strftime("%Y-%m-%dT%H:%MZ"),
                    "bucket_ms": b.bucket_ms,
                    "bucket_s": size // 1000,
                    by: key,
                    count: n,
                    "seconds": b.seconds,
                    "per_s": n / max(b.seconds, MIN_COVERED_S),
                    "partial": b.partial,
                }
            )
    if found:
        raise ValueError(f"counts outside the time range {span}: {sorted(found)[:3]}")
    columns = ["bucket", "bucket_ms", "bucket_s", by, count, "seconds", "per_s", "partial"]
    return pd.DataFrame(rows, columns=columns)


def _seconds_text(seconds: float) -> str:
    """Covered seconds, rounded down (59.9 s of a minute is not "60 s")."""
    return f"{int(seconds * 10) / 10:.1f} s" if seconds < 10 else f"{int(seconds)} s"


@dataclass(frozen=True)
class Drawn:
    """What a chart shows, read back from the drawn axes (what the tests check)."""

    x_from_ms: int
    x_to_ms: int
    tick_labels: tuple[str, ...]
    partial_labels: tuple[int, ...]
    """``bucket_ms`` of each bucket labelled partial on the chart."""
    bucket: str
    """The bucket size's name (``BUCKETS``)."""
    series: tuple[str, ...]


def rate_chart(
    table: Any, by: str, span: tuple[int, int], *, title: str, ylabel: str, clock: str, path: Path
) -> Drawn:
    """One line per ``by`` value of a ``rate_table``: points at the middle of each bucket's
    covered part, the x axis exactly ``span``; partial buckets hollow and labelled."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import dates
    from matplotlib import pyplot as plt

    mdates: Any = dates  # untyped in part; datetimes on the axes are not in its stubs
    size = bucket_size(*span)
    spans = {b.bucket_ms: b for b in buckets(*span, size)}
    fig, axes = plt.subplots(figsize=(10, 4))
    ax: Any = axes
    series: list[str] = []
    for key, rows in table.groupby(by, sort=True):
        xs = [_utc(spans[int(m)].middle_ms) for m in rows["bucket_ms"]]
        (line,) = ax.plot(xs, list(rows["per_s"]), marker="o", markersize=4, label=str(key))
        series.append(str(key))
        part = rows[rows["partial"]]
        if len(part):
            ax.plot(
                [_utc(spans[int(m)].middle_ms) for m in part["bucket_ms"]],
                list(part["per_s"]),
                linestyle="none",
                marker="o",
                markersize=8,
                markerfacecolor="white",
                markeredgecolor=line.get_color(),
            )
    partial = [m for m in spans.values() if m.partial]
    top = float(table["per_s"].max()) if len(table) else 1.0
    for m in partial:
        ax.annotate(
            f"partial ({_seconds_text(m.seconds)})",
            (_utc(m.middle_ms), top),
            textcoords="offset points",
            xytext=(0, 6),
            ha="center",
            fontsize="small",
            color="dimgray",
        )
    if partial:  # a legend entry explaining the hollow markers
        ax.plot(
            [],
            [],
            linestyle="none",
            marker="o",
            markerfacecolor="white",
            markeredgecolor="dimgray",
            label=f"partial {BUCKETS[size]}: rate over\nits covered seconds",
        )
    lo, hi = span
    if lo == hi:  # one instant: show the minute around it
        lo, hi = lo - MINUTE_MS // 2, hi + MINUTE_MS // 2
    ax.set_xlim(_utc(lo), _utc(hi))
    ax.set_ylim(bottom=0, top=top * 1.15 if top > 0 else 1.0)
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%Y-%m-%d\n%H:%M:%S", tz=UTC))
    ax.set_title(title)
    ax.set_xlabel(f"time (UTC, {clock})")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if series:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, fontsize="small")
    fig.canvas.draw()
    x0, x1 = ax.get_xlim()
    drawn = Drawn(
        x_from_ms=round(mdates.num2date(x0).timestamp() * 1000),
        x_to_ms=round(mdates.num2date(x1).timestamp() * 1000),
        tick_labels=tuple(t.get_text() for t in ax.get_xticklabels()),
        partial_labels=tuple(m.bucket_ms for m in partial),
        bucket=BUCKETS[size],
        series=tuple(series),
    )
    fig.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(fig)
    return drawn


def bar_chart(labels: list[str], values: list[int], *, title: str, xlabel: str, path: Path) -> None:
    """Horizontal bars, the first label on top."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(9, max(2.5, 0.3 * len(labels) + 1)))
    ax.barh(labels[::-1], values[::-1])
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    fig.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(fig)
