"""``octosync pipeline report``: one HTML page (``OUT/index.html``) with a section each for
shared documents (edits per document, per writer and per minute, and each document's merged
values), CRDT ops, hot keys, concurrent writes, the server's stream frames, the chains its
chain face relayed, its dataspaces and its Yjs documents, as PNG charts and CSV
tables."""

from __future__ import annotations

import html
import json
from functools import partial
from pathlib import Path
from typing import Any

import msgspec

from octosync.pipeline import charts
from octosync.pipeline.inputs import read_dataset, read_frames, read_ops, resolve_export
from octosync.pipeline.jobs._stages import Progress, quiet, stage
from octosync.pipeline.transforms import activity as transforms
from octosync.pipeline.transforms import chain, dataspace, documents, traffic, yjs


class ReportResult(msgspec.Struct, frozen=True):
    ops: int
    conflicts: int
    index: str
    charts: list[str]
    streams: list[str] = []
    """The streams whose frames the journal holds (the stream section lists each)."""
    axes: dict[str, tuple[int, int]] = {}
    """Each time chart's x axis as drawn, in UTC milliseconds since the epoch."""
    chain_events: int = 0
    """Distinct device events the chain face relayed."""
    chain_states: int = 0
    """Distinct state changes the chain face saw."""
    dataspace_events: int = 0
    """Assertions, retractions and messages the dataspaces took."""
    document_edits: int = 0
    """Distinct edits of shared documents."""
    documents: list[str] = []
    """The shared documents the journal holds edits of."""
    document_values: list[tuple[str, str, str, Any]] = []
    """Each document's merged values: ``(document, name, kind, value)``."""
    yjs_updates: int = 0
    """Yjs updates the ``/yjs`` face journaled (a compacted document's merge counts once)."""


class _Section(msgspec.Struct):
    """One ``<h2>`` of the page and what goes under it."""

    heading: str
    body: list[str]


def _table_html(pdf: Any, limit: int = 20) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in pdf.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>"
        for row in pdf.head(limit).itertuples(index=False)
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _img(name: str, alt: str) -> str:
    return f'<p><img src="{html.escape(name)}" alt="{html.escape(alt)}"></p>'


def _partial_note(drawn: charts.Drawn) -> str:
    if not drawn.partial_labels:
        return ""
    which = ", ".join(charts.utc_text(m)[:-7] for m in drawn.partial_labels)
    return (
        f"<p class='note'>Partial buckets (each a {drawn.bucket}; the data covers only part of "
        f"them, so their rate is taken over the covered seconds, drawn hollow): "
        f"{html.escape(which)} UTC.</p>"
    )


def _per(span: tuple[int, int]) -> str:
    return f"average per {charts.BUCKETS[charts.bucket_size(*span)]}"


def _span_text(span: tuple[int, int]) -> str:
    return f"from {charts.utc_text(span[0])} to {charts.utc_text(span[1])}"


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
        frames = read_frames(spark, source).cache()
        n_ops = ops.count()
        n_frames = frames.count()
        progress(f"{n_ops} distinct ops, {n_frames} stream frames")
    with stage("aggregate", source, progress):
        op_span = transforms.time_range(ops, "millis")
        per_map = transforms.ops_per_minute(ops, "map").toPandas()
        per_origin = transforms.ops_per_minute(ops, "origin").toPandas()
        conflicts = transforms.write_conflicts(ops, conflict_window_ms).cache()
        n_conflicts = conflicts.count()
        conflict_keys = transforms.conflicts_per_key(conflicts, top).toPandas()
        hot = transforms.hottest_keys(ops, top).toPandas()
        frame_span = transforms.time_range(frames, "recorded_ms")
        per_stream = traffic.frames_per_minute(frames).toPandas()
        streams = traffic.stream_traffic(frames).toPandas()
        ops.unpersist()
        frames.unpersist()
        conflicts.unpersist()
    with stage("shared documents", source, progress):
        read = partial(read_dataset, spark, source)
        edits = documents.all_edits(read).cache()
        n_edits = edits.count()
        edit_span = transforms.time_range(edits, "recorded_ms")
        per_document = documents.document_summary(edits).toPandas()
        per_writer = documents.edits_per_writer(edits).toPandas()
        edits_per_minute = transforms.per_minute(
            edits, "recorded_ms", "document", "edits"
        ).toPandas()
        edits.unpersist()
        values = documents.all_values(read)
        progress(f"{n_edits} edits of {len(per_document)} shared documents")
    with stage("chains and dataspaces", source, progress):
        events = chain.distinct_events(read_dataset(spark, source, "chain_events")).cache()
        states = read_dataset(spark, source, "chain_states")
        n_events = events.count()
        n_states = chain.distinct_states(states).count()
        by_device = chain.events_by_device(events).toPandas()
        by_name = chain.events_by_name(events).toPandas()
        latency = chain.latency_by_name(chain.consumption(events, states)).toPandas()
        events.unpersist()
        ds_rows = read_dataset(spark, source, "dataspace").cache()
        n_ds = ds_rows.count()
        by_label = dataspace.activity_by_label(ds_rows).toPandas()
        lifetimes = dataspace.lifetime_by_label(dataspace.assertion_lifetimes(ds_rows))
        lifetimes_pdf = lifetimes.toPandas()
        ds_rows.unpersist()
        yjs_rows = read_dataset(spark, source, "yjs_updates")
        yjs_per_minute = yjs.updates_per_minute(yjs_rows).toPandas()
        n_yjs = int(yjs_per_minute["updates"].sum()) if len(yjs_per_minute) else 0
    with stage("charts and page", out, progress):
        drawn: list[str] = []
        axes: dict[str, tuple[int, int]] = {}
        tables: dict[str, Any] = {"hottest_keys.csv": hot, "conflicts_per_key.csv": conflict_keys}
        sections = [
            _documents_section(
                _DocumentTables(per_document, per_writer, edits_per_minute, values),
                edit_span,
                n_edits,
                out,
                drawn,
                tables,
                axes,
            ),
            _ops_section(per_map, per_origin, op_span, n_ops, out, drawn, tables, axes),
            _keys_section(hot, top, out, drawn),
            _conflicts_section(conflict_keys, n_conflicts, conflict_window_ms, top, out, drawn),
            _streams_section(per_stream, streams, frame_span, n_frames, out, drawn, tables, axes),
            _chain_section(n_events, n_states, by_device, by_name, latency, tables),
            _dataspace_section(n_ds, by_label, lifetimes_pdf, tables),
            _yjs_section(n_yjs, yjs_per_minute, tables),
        ]
        for name, pdf in tables.items():
            pdf.to_csv(out / name, index=False)
        body = "".join(f"<h2>{html.escape(s.heading)}</h2>{''.join(s.body)}" for s in sections)
        page = (
            "<!doctype html><html><head><meta charset='utf-8'>"
            "<title>octosync journal report</title>"
            "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:2px 6px}.note{color:#555}</style></head><body>"
            f"<h1>octosync journal report</h1>"
            f"<p>{html.escape(str(journal))}: {n_edits} edits of {len(per_document)} shared "
            f"documents, {n_ops} distinct CRDT ops (TopGun maps), {n_frames} stream "
            f"frames, {n_conflicts} concurrent writes, {n_events} chain events, {n_ds} "
            f"dataspace events, {n_yjs} Yjs updates.</p>{body}</body></html>"
        )
        (out / "index.html").write_text(page, encoding="utf-8")
    progress(f"report in {out / 'index.html'}")
    return ReportResult(
        n_ops,
        n_conflicts,
        str(out / "index.html"),
        sorted(drawn),
        sorted(streams["stream"]),
        axes,
        n_events,
        n_states,
        n_ds,
        n_edits,
        sorted(per_document["document"]),
        values,
        n_yjs,
    )


class _DocumentTables(msgspec.Struct):
    per_document: Any
    per_writer: Any
    per_minute: Any
    values: list[tuple[str, str, str, Any]]


def _documents_section(
    t: _DocumentTables,
    span: tuple[int, int] | None,
    n_edits: int,
    out: Path,
    drawn: list[str],
    tables: dict[str, Any],
    axes: dict[str, tuple[int, int]],
) -> _Section:
    section = _Section("Shared documents", [])
    if span is None:
        section.body.append(
            "<p>No shared-document edits in this journal (the server journals every edit "
            "clients make to shared documents: counters, registers, maps).</p>"
        )
        return section
    table = charts.rate_table(t.per_minute, "document", "edits", span)
    shown = charts.rate_chart(
        table,
        "document",
        span,
        title=f"Shared-document edits per second ({_per(span)})",
        ylabel="edits/s",
        clock="server time when journalled",
        path=out / "edits_per_second_by_document.png",
    )
    drawn.append("edits_per_second_by_document.png")
    axes["edits_per_second_by_document.png"] = (shown.x_from_ms, shown.x_to_ms)
    tables["edits_over_time_by_document.csv"] = table
    listed = t.per_document.assign(
        first=[charts.utc_text(int(m)) for m in t.per_document["first_ms"]],
        last=[charts.utc_text(int(m)) for m in t.per_document["last_ms"]],
    )[["document", "face", "edits", "writers", "first", "last"]]
    tables["documents.csv"] = listed
    tables["document_writers.csv"] = t.per_writer
    import pandas as pd

    values = pd.DataFrame(
        [(d, n, k, json.dumps(v, sort_keys=True)) for d, n, k, v in t.values],
        columns=["document", "name", "kind", "value"],
    )
    tables["document_values.csv"] = values
    section.body += [
        f"<p>{n_edits} edits of {len(listed)} shared documents {_span_text(span)} (an edit "
        "is one op a client wrote, counted once; a writer is one client replica).</p>",
        _img("edits_per_second_by_document.png", "shared-document edits per second"),
        _partial_note(shown),
        _table_html(listed, limit=len(listed)),
        "<h3>Edits per writer</h3>",
        _table_html(t.per_writer),
        "<h3>Values (each document merged as the server merges it)</h3>",
        _table_html(values, limit=200),
    ]
    return section


def _chain_section(
    n_events: int,
    n_states: int,
    by_device: Any,
    by_name: Any,
    latency: Any,
    tables: dict[str, Any],
) -> _Section:
    section = _Section("Chains", [])
    if not n_events and not n_states:
        section.body.append(
            "<p>No chain activity in this journal (the server journals what its chain face, "
            "<code>--chain-config</code>, relays).</p>"
        )
        return section
    listed = by_device.assign(
        first=[charts.utc_text(int(m)) for m in by_device["first_ms"]],
        last=[charts.utc_text(int(m)) for m in by_device["last_ms"]],
    )[["chain", "device", "events", "first", "last"]]
    tables["chain_events_by_device.csv"] = listed
    tables["chain_events_by_name.csv"] = by_name
    tables["chain_latency_by_name.csv"] = latency
    section.body += [
        f"<p>{n_events} device events relayed by the chain face and {n_states} state changes "
        "it saw. Latency runs from an event's arrival at the server to the arrival of the "
        "state change that consumed it.</p>",
        "<h3>Events per device</h3>",
        _table_html(listed),
        "<h3>Events per name</h3>",
        _table_html(by_name),
        "<h3>Latency from device event to state change, per name (ms)</h3>",
        _table_html(latency) if len(latency) else "<p>No consumed event was seen.</p>",
    ]
    return section


def _dataspace_section(
    n_rows: int, by_label: Any, lifetimes: Any, tables: dict[str, Any]
) -> _Section:
    section = _Section("Dataspaces", [])
    if not n_rows:
        section.body.append("<p>No dataspace activity in this journal.</p>")
        return section
    listed = by_label.merge(lifetimes, on=["dataspace", "label"], how="left")
    listed["retracted"] = listed["retracted"].fillna(0).astype("int64")
    listed["lifetime_max_ms"] = listed["lifetime_max_ms"].astype("Int64")  # empty: none
    tables["dataspace_by_label.csv"] = listed
    section.body += [
        f"<p>{n_rows} assertions, retractions and messages the dataspaces took (after "
        "caveats), per record label; lifetimes are of assertions retracted (by their peer or "
        "when its connection closed).</p>",
        _table_html(listed, limit=len(listed)),
    ]
    return section


def _ops_section(
    per_map: Any,
    per_origin: Any,
    span: tuple[int, int] | None,
    n_ops: int,
    out: Path,
    drawn: list[str],
    tables: dict[str, Any],
    axes: dict[str, tuple[int, int]],
) -> _Section:
    section = _Section("CRDT ops", [])
    if span is None:
        section.body.append("<p>No CRDT ops in this journal.</p>")
        return section
    section.body.append(
        f"<p>{n_ops} distinct ops {_span_text(span)} (HLC time: each op's own clock).</p>"
    )
    for pdf, by, what in ((per_map, "map", "map"), (per_origin, "origin", "origin")):
        table = charts.rate_table(pdf, by, "ops", span)
        name = f"ops_per_second_by_{by}.png"
        shown = charts.rate_chart(
            table,
            by,
            span,
            title=f"CRDT ops per second by {what} ({_per(span)})",
            ylabel="ops/s",
            clock="HLC time",
            path=out / name,
        )
        drawn.append(name)
        axes[name] = (shown.x_from_ms, shown.x_to_ms)
        tables[f"ops_over_time_by_{by}.csv"] = table
        section.body.append(_img(name, f"ops per second by {what}"))
        if by == "map":
            section.body.append(_partial_note(shown))
    return section


def _keys_section(hot: Any, top: int, out: Path, drawn: list[str]) -> _Section:
    section = _Section("Hottest keys", [])
    if not len(hot):
        section.body.append("<p>No keys.</p>")
        return section
    labels = [f"{m}/{k}" for m, k in zip(hot["map"], hot["key"], strict=True)]
    charts.bar_chart(
        labels,
        list(hot["ops"]),
        title=f"Top {top} keys by ops",
        xlabel="ops",
        path=out / "hottest_keys.png",
    )
    drawn.append("hottest_keys.png")
    section.body += [_img("hottest_keys.png", "hottest keys"), _table_html(hot)]
    return section


def _conflicts_section(
    conflict_keys: Any, n: int, window_ms: int, top: int, out: Path, drawn: list[str]
) -> _Section:
    section = _Section(
        "Concurrent writes",
        [
            f"<p>{n} concurrent writes: consecutive writes to one key from different origins "
            f"whose HLCs are within {window_ms} ms.</p>"
        ],
    )
    if not len(conflict_keys):
        return section
    labels = [f"{m}/{k}" for m, k in zip(conflict_keys["map"], conflict_keys["key"], strict=True)]
    charts.bar_chart(
        labels,
        list(conflict_keys["conflicts"]),
        title=f"Top {top} keys by concurrent writes",
        xlabel="concurrent writes",
        path=out / "conflicts.png",
    )
    drawn.append("conflicts.png")
    section.body += [
        _img("conflicts.png", "keys with most concurrent writes"),
        _table_html(conflict_keys),
    ]
    return section


def _streams_section(
    per_stream: Any,
    streams: Any,
    span: tuple[int, int] | None,
    n_frames: int,
    out: Path,
    drawn: list[str],
    tables: dict[str, Any],
    axes: dict[str, tuple[int, int]],
) -> _Section:
    section = _Section("Stream frames", [])
    if span is None:
        section.body.append("<p>No stream frames in this journal (a server journals them).</p>")
        return section
    table = charts.rate_table(per_stream, "stream", "frames", span)
    shown = charts.rate_chart(
        table,
        "stream",
        span,
        title=f"Stream frames per second ({_per(span)})",
        ylabel="frames/s",
        clock="server time when journalled",
        path=out / "frames_per_second_by_stream.png",
    )
    drawn.append("frames_per_second_by_stream.png")
    axes["frames_per_second_by_stream.png"] = (shown.x_from_ms, shown.x_to_ms)
    tables["frames_over_time_by_stream.csv"] = table
    seconds = [
        max((b - a) / 1000, charts.MIN_COVERED_S)
        for a, b in zip(streams["first_ms"], streams["last_ms"], strict=True)
    ]
    listed = streams.assign(
        frames_per_s=[round(f / s, 2) for f, s in zip(streams["frames"], seconds, strict=True)],
        first=[charts.utc_text(int(m)) for m in streams["first_ms"]],
        last=[charts.utc_text(int(m)) for m in streams["last_ms"]],
    )[
        [
            "stream",
            "frames",
            "frames_per_s",
            "snapshots",
            "deltas",
            "producers",
            "resyncs",
            "max_epoch",
            "first",
            "last",
        ]
    ]
    tables["streams.csv"] = listed
    section.body += [
        f"<p>{n_frames} frames the server accepted on {len(listed)} streams "
        f"{_span_text(span)} (a producer is one producing connection; a resync is a "
        "snapshot from a producer that had already sent one).</p>",
        _img("frames_per_second_by_stream.png", "stream frames per second"),
        _partial_note(shown),
        _table_html(listed, limit=len(listed)),
    ]
    return section


def _yjs_section(n_updates: int, per_minute: Any, tables: dict[str, Any]) -> _Section:
    section = _Section("Yjs documents", [])
    if not n_updates:
        section.body.append("<p>No Yjs updates in this journal (the <code>/yjs</code> face).</p>")
        return section
    listed = per_minute.assign(minute=[charts.utc_text(int(m)) for m in per_minute["minute_ms"]])[
        ["document", "writer", "minute", "updates", "bytes"]
    ]
    tables["yjs_updates_per_minute.csv"] = listed
    section.body += [
        f"<p>{n_updates} updates the Yjs face journaled, per document, writer (a connection, "
        "<code>run.connection</code>) and minute, with their size in bytes.</p>",
        _table_html(listed),
    ]
    return section
