"""``octosync pipeline report``: activity, conflicts and hot keys as CSV tables, PNG charts
and one HTML page (``OUT/index.html``)."""

from __future__ import annotations

import html
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from octosync.pipeline.inputs import read_ops, resolve_export
from octosync.pipeline.jobs._stages import Progress, quiet, stage
from octosync.pipeline.transforms import activity as transforms


class ReportResult(msgspec.Struct, frozen=True):
    ops: int
    conflicts: int
    index: str
    charts: list[str]


def _line_chart(pdf: Any, by: str, title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    if len(pdf):
        wide = pdf.pivot_table(index="minute", columns=by, values="ops", fill_value=0)
        for column in wide.columns:
            ax.plot(wide.index, wide[column], marker=".", label=str(column))
        ax.legend(loc="upper left", fontsize="small")
    ax.set_title(title)
    ax.set_xlabel("minute (UTC, HLC time)")
    ax.set_ylabel("ops")
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _bar_chart(pdf: Any, value: str, title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    labels = [f"{m}/{k}" for m, k in zip(pdf["map"], pdf["key"], strict=True)]
    ax.barh(labels[::-1], list(pdf[value])[::-1])
    ax.set_title(title)
    ax.set_xlabel(value)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _table_html(pdf: Any, limit: int = 20) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in pdf.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>"
        for row in pdf.head(limit).itertuples(index=False)
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def run(
    spark: Any,
    journal: Path,
    out: Path,
    *,
    top: int = 20,
    conflict_window_ms: int = 1_000,
    progress: Progress = quiet,
) -> ReportResult:
    journal, out = Path(journal), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with stage("read journal", journal, progress):
        source = resolve_export(journal, progress)
        ops = transforms.distinct_ops(read_ops(spark, source)).cache()
        n_ops = ops.count()
        progress(f"{n_ops} distinct ops")
    with stage("aggregate", source, progress):
        per_map = transforms.ops_per_minute(ops, "map").toPandas()
        per_origin = transforms.ops_per_minute(ops, "origin").toPandas()
        conflicts = transforms.write_conflicts(ops, conflict_window_ms).cache()
        n_conflicts = conflicts.count()
        conflict_keys = transforms.conflicts_per_key(conflicts, top).toPandas()
        hot = transforms.hottest_keys(ops, top).toPandas()
        ops.unpersist()
        conflicts.unpersist()
    with stage("charts and page", out, progress):
        charts: dict[str, Callable[[Path], None]] = {
            "ops_per_minute_by_map.png": lambda p: _line_chart(
                per_map, "map", "Ops per minute by map", p
            ),
            "ops_per_minute_by_origin.png": lambda p: _line_chart(
                per_origin, "origin", "Ops per minute by origin", p
            ),
            "hottest_keys.png": lambda p: _bar_chart(hot, "ops", f"Top {top} keys by ops", p),
            "conflicts.png": lambda p: _bar_chart(
                conflict_keys, "conflicts", f"Top {top} keys by concurrent writes", p
            ),
        }
        for name, draw in charts.items():
            draw(out / name)
        for name, pdf in {
            "ops_per_minute_by_map.csv": per_map,
            "ops_per_minute_by_origin.csv": per_origin,
            "hottest_keys.csv": hot,
            "conflicts_per_key.csv": conflict_keys,
        }.items():
            pdf.to_csv(out / name, index=False)
        images = "".join(
            f'<h2>{html.escape(n[:-4].replace("_", " "))}</h2><img src="{n}">' for n in charts
        )
        summary = (
            f"{n_ops} distinct ops from {html.escape(str(journal))}; {n_conflicts} concurrent "
            f"writes (different origins, HLCs within {conflict_window_ms} ms)."
        )
        page = (
            "<!doctype html><html><head><meta charset='utf-8'>"
            "<title>octosync journal report</title>"
            "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:2px 6px}</style></head><body>"
            f"<h1>octosync journal report</h1><p>{summary}</p>"
            f"{images}<h2>Hottest keys</h2>{_table_html(hot)}"
            f"<h2>Keys with most concurrent writes</h2>{_table_html(conflict_keys)}</body></html>"
        )
        (out / "index.html").write_text(page, encoding="utf-8")
    progress(f"report in {out / 'index.html'}")
    return ReportResult(n_ops, n_conflicts, str(out / "index.html"), sorted(charts))
