"""``SQL_QUERY``: read-only SQL over the TopGun maps a token may read (DuckDB, the ``sql`` extra).

TopGun's own server ships SQL switched off; here a server with ``topgun_sql`` on answers it.
Each map the query names is a table (named like the map, quoted when it needs to be): a
``_key`` column and one column per top-level field of the values (numbers, strings and
booleans as themselves, anything else as JSON text). The query runs in a fresh in-memory
DuckDB with no file or network access (``enable_external_access`` off, configuration locked),
must be a single ``SELECT``, and is bounded: the maps it reads (at most
:data:`MAX_TABLE_ROWS` records each, copied on the event loop when the request arrives), its
time (:data:`MAX_SECONDS` from when its worker starts it; then the server interrupts it: no
timer here), its memory, and its result (:data:`MAX_RESULT_ROWS` rows). It runs off the
event loop (:class:`OffLoop`): the server hands it to a worker thread and sends its answer
when it is done; at most
``offload.MAX_RUNNING`` run at once, others are answered "busy".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from octosync import extras
from octosync.errors import DecodeError, FeatureDisabled, Forbidden, LimitExceeded, OctosyncError
from octosync.topgun.offload import OffLoop
from octosync.topgun.replies import reason, wire_code
from octosync.wire import topgun as tg
from octosync.wire import topgun_requests as rq

MAX_SQL_CHARS = 16 * 1024
MAX_TABLE_ROWS = 50_000
MAX_RESULT_ROWS = 1_000
MAX_SECONDS = 2.0
MEMORY_LIMIT = "256MB"
_DEC = msgspec.msgpack.Decoder()
_ENC = msgspec.msgpack.Encoder(enc_hook=str)


def _refusal(query_id: str, err: OctosyncError) -> tg.Message:
    payload = rq.SqlQueryRespPayload(query_id, [], [], reason(err), wire_code(err))
    return rq.SqlQueryResp(payload)


def maps_read(sql: str) -> tuple[str, ...]:
    """The maps a query reads, sorted; none for one :func:`prepare` refuses anyway (too long,
    not SQL, no ``sql`` extra). In a cluster holding maps by interest the query waits for
    their loads."""
    if len(sql) > MAX_SQL_CHARS or not extras.installed("sql"):
        return ()
    import duckdb

    try:
        return tuple(sorted(duckdb.get_table_names(sql)))
    except duckdb.Error:
        return ()


def prepare(
    p: rq.SqlQueryPayload,
    conn: int,
    may_read: Callable[[str], bool],
    items: Callable[[str], Mapping[str, bytes]],
) -> OffLoop:
    """Check the query and copy the maps it reads (on the loop); raise to refuse it."""
    if not extras.installed("sql"):  # optional: the sql extra (extras.install_hint)
        raise FeatureDisabled(str(extras.missing_extra("sql", "SQL")), path="type")
    import duckdb

    if len(p.sql) > MAX_SQL_CHARS:
        raise LimitExceeded(
            f"a SQL query is at most {MAX_SQL_CHARS} characters", path="payload.sql"
        )
    try:
        statements = duckdb.extract_statements(p.sql)
        names = duckdb.get_table_names(p.sql)
    except duckdb.Error as exc:
        raise DecodeError(f"SQL: {exc}", path="payload.sql") from None
    if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
        raise Forbidden("SQL here is one SELECT statement, read-only", path="payload.sql")
    tables: dict[str, Mapping[str, bytes]] = {}
    for name in sorted(names):
        if not may_read(name):
            raise Forbidden(
                f"the token does not allow to read the map {name!r}", path="payload.sql"
            )
        rows = items(name)
        if len(rows) > MAX_TABLE_ROWS:
            raise LimitExceeded(
                f"SQL reads maps of at most {MAX_TABLE_ROWS} records; {name!r} has {len(rows)}",
                path="payload.sql",
            )
        tables[name] = dict(rows)
    query = SqlRun(p.query_id, p.sql, tables)
    return OffLoop(
        conn,
        lambda: [query.run()],
        lambda: [_refusal(p.query_id, LimitExceeded("the server is busy with SQL; try again"))],
        seconds=MAX_SECONDS,
        interrupt=query.interrupt,
    )


class SqlRun:
    """One checked query over copies of the maps: :meth:`run` on a worker thread,
    :meth:`interrupt` from any thread (the server's, once :data:`MAX_SECONDS` passed)."""

    def __init__(self, query_id: str, sql: str, tables: Mapping[str, Mapping[str, bytes]]):
        self.query_id = query_id
        self.sql = sql
        self.tables = tables
        self._db: Any = None
        self._stopped = False

    def interrupt(self) -> None:
        """End the query: at once when it runs, before it starts otherwise. The server calls
        this until :meth:`run` returns, so an interrupt that falls between the checks is
        followed by one that lands."""
        self._stopped = True
        db = self._db
        if db is not None:
            db.interrupt()

    def run(self) -> tg.Message:
        """The ``SQL_QUERY_RESP``, with ``error`` when it failed or was interrupted."""
        import duckdb
        import pyarrow as pa

        late = LimitExceeded(f"the query ran past {MAX_SECONDS} s", path="payload.sql")
        db = self._db = duckdb.connect(":memory:")
        try:
            db.execute("SET enable_external_access = false")
            db.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
            db.execute("SET threads = 1")
            db.execute("SET lock_configuration = true")
            for name, rows in self.tables.items():
                db.register(name, pa.Table.from_pydict(_columns(rows)))
            if self._stopped:
                return _refusal(self.query_id, late)
            cursor = db.execute(self.sql)
            got = cursor.fetchmany(MAX_RESULT_ROWS + 1)
            columns = [d[0] for d in cursor.description or []]
        except duckdb.InterruptException:
            return _refusal(self.query_id, late)
        except (duckdb.Error, pa.ArrowException) as exc:
            return _refusal(self.query_id, DecodeError(f"SQL: {exc}", path="payload.sql"))
        finally:
            self._db = None
            db.close()
        if len(got) > MAX_RESULT_ROWS:
            err = LimitExceeded(
                f"more than {MAX_RESULT_ROWS} rows: add a LIMIT", path="payload.sql"
            )
            return _refusal(self.query_id, err)
        out = [[msgspec.Raw(_ENC.encode(cell)) for cell in row] for row in got]
        return rq.SqlQueryResp(rq.SqlQueryRespPayload(self.query_id, columns, out))


def _columns(rows: Mapping[str, bytes]) -> dict[str, list[Any]]:
    """A map as columns: ``_key``, then each top-level field (a value that is not a map is
    the column ``value``); a column whose values are not all of one plain type is JSON text."""
    keys = sorted(rows)
    values = [_DEC.decode(rows[k]) for k in keys]
    fields: dict[str, None] = {}
    for v in values:
        fields.update(dict.fromkeys(v if isinstance(v, dict) else ["value"]))
    cols: dict[str, list[Any]] = {"_key": keys}
    for f in fields:
        if f == "_key":
            continue
        cells = [(v.get(f) if isinstance(v, dict) else v if f == "value" else None) for v in values]
        kinds = {_kind(c) for c in cells if c is not None}
        if kinds == {"int", "float"}:
            cells = [None if c is None else float(c) for c in cells]
        elif len(kinds) > 1 or kinds & {"other"}:
            cells = [None if c is None else msgspec.json.encode(c).decode() for c in cells]
        cols[f] = cells
    return cols


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    return "other"
