"""The committed state of a sink that writes a PostgreSQL table: the table in one ``REPEATABLE READ``
snapshot.

Under ``REPEATABLE READ`` every statement of a transaction sees the snapshot taken at its first statement
(postgresql.org/docs/15/transaction-iso.html), so the rows and the progress table are read at one commit
point, and nothing an open or rolled-back transaction wrote is counted, as Kafka's read_committed skips
aborted records. Rows come back in insertion order (``id``), which plays the output offset, when the table
has one, else in no order; duplicates are rows of the same (key, seq), found by the exactly-once checker
like duplicate Kafka records.
"""

from __future__ import annotations

import io

import psycopg
import pyarrow as pa
import pyarrow.csv as pacsv
from psycopg import sql

from onceproof.pipeline.postgres_sink import PROGRESS_TABLE
from onceproof.sinks import table_rows
from onceproof.sinks.base import OutputError, OutputLocation, OutputView

ORDER_KEY = "order_key"
"""The column the read names a declared order column's value (``--order-column``) by: int64, a
timestamp as epoch microseconds."""
_TIME_TYPES = ("timestamp with time zone", "timestamp without time zone", "date")


def _copy_out(conn: psycopg.Connection, table: str, columns: list[str], order: tuple[str, str] | None = None
              ) -> pa.Table:
    """The table's ``columns`` in one ``COPY ... TO STDOUT (FORMAT csv)``, parsed by pyarrow's CSV reader: a
    million rows in seconds, where fetching Python tuples takes ~10 s. ``order``: a declared order column
    and its SQL type, read as :data:`ORDER_KEY` and sorted by; else in ``id`` order when the table has one,
    else in no order (a row's physical place, ``ctid``, is no order a user reads, and an ``UPDATE`` moves it)."""
    cols = [sql.Identifier(c) for c in columns]
    by = sql.SQL("")
    if order is not None:
        col, kind = sql.Identifier(order[0]), order[1]
        key = (sql.SQL("(extract(epoch from {}) * 1000000)::bigint").format(col) if kind in _TIME_TYPES
               else sql.SQL("({})::bigint").format(col))
        cols.append(sql.SQL("{} AS {}").format(key, sql.Identifier(ORDER_KEY)))
        by = sql.SQL(" ORDER BY {}").format(sql.Identifier(ORDER_KEY))
    elif "id" in columns:
        by = sql.SQL(" ORDER BY {}").format(sql.Identifier("id"))
    query = sql.SQL("COPY (SELECT {} FROM {}{}) TO STDOUT (FORMAT csv, HEADER true)").format(
        sql.SQL(", ").join(cols), sql.Identifier(table), by)
    buf = io.BytesIO()
    with conn.cursor().copy(query) as cp:
        for chunk in cp:
            buf.write(chunk)
    buf.seek(0)
    types = {c: table_rows.TYPES[c] for c in columns} | ({ORDER_KEY: pa.int64()} if order else {})
    return pacsv.read_csv(buf, convert_options=pacsv.ConvertOptions(column_types=types, strings_can_be_null=True,
                                                                   quoted_strings_can_be_null=False))


def _columns(conn: psycopg.Connection, table: str, order_column: str = "") -> tuple[list[str], tuple | None]:
    """The columns to read of ``table`` (``id`` when present, ``key``, ``seq``, then the optional ones it
    has) and the declared ``order_column`` with its SQL type (``None`` without one). Raises
    :class:`OutputError` when it is missing, lacks ``key`` or ``seq``, or has no ``order_column``."""
    types = dict(conn.execute("SELECT column_name, data_type FROM information_schema.columns WHERE table_name = %s "
                              "AND table_schema = current_schema()", (table,)).fetchall())
    have = set(types)
    if not have:
        raise OutputError(f"table {table} is not in the database: the job wrote nothing there (does it write "
                          f"{{output_table}}?)")
    table_rows.check_columns(have, order_column, f"table {table}", "postgres")
    return [c for c in table_rows.COLUMNS if c in have], ((order_column, types[order_column]) if order_column
                                                           else None)


def read_output(location: OutputLocation) -> OutputView:
    """The table named ``location.topic`` in the database at ``location.dsn`` into an
    :class:`~onceproof.sinks.base.OutputView`: ``committed`` = ``uncommitted`` = the snapshot's rows (a
    database shows no uncommitted rows to another session), ranked by ``location.order_column`` when one
    is declared, else in ``id`` order when the table has one, else with no order (``table_rows.frame``:
    the per-key order is then not judged); ``summary`` names the table, the rows, the ``order`` (the
    declared column, ``"id"`` or ``None``), the snapshot (``pg_current_snapshot()``) and the bundled
    sinks' progress rows seen.

    Raises: :class:`~onceproof.sinks.base.OutputError` when the database cannot be reached, or the table is
    missing or lacks ``key``/``seq`` or the declared order column, naming which."""
    if not location.dsn:
        raise OutputError("no database to read: this run's sink writes PostgreSQL, and the check was given no "
                          "connection string (re-check a stored run from its snapshots: onceproof check RUN_DIR)")
    try:
        with psycopg.connect(location.dsn, connect_timeout=10) as conn:
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            conn.read_only = True
            with conn.transaction():
                snapshot = conn.execute("SELECT pg_current_snapshot()::text").fetchone()[0]
                columns, order = _columns(conn, location.topic, location.order_column)
                table = _copy_out(conn, location.topic, columns, order)
                exists = conn.execute("SELECT to_regclass(%s)", (PROGRESS_TABLE,)).fetchone()[0]
                progress = (conn.execute(sql.SQL("SELECT app_id, batch_id FROM {}").format(
                    sql.Identifier(PROGRESS_TABLE))).fetchall() if exists else [])
    except psycopg.Error as e:
        raise OutputError(f"cannot read table {location.topic} from PostgreSQL ({type(e).__name__}: {e})") from e
    rank = None
    if order is not None:  # the declared order: ranks (ties unordered), not id
        rank = table[ORDER_KEY].fill_null(-1).to_numpy().astype("int64")
        table = table.drop_columns([c for c in ("id", ORDER_KEY) if c in table.column_names])
    frame = table_rows.frame(table, rank)
    summary = {"table": location.topic, "rows": table.num_rows,
               "order": order[0] if order else ("id" if "id" in columns else None),
               "snapshot": snapshot, "isolation": "repeatable read",
               "progress_rows": len(progress), "progress": {a: int(b) for a, b in progress}}
    return OutputView(committed=frame, uncommitted=frame[["partition", "offset"]].copy(),
                      stats={"postgres_rows": table.num_rows}, summary=summary, result_key="postgres")


class RowCountEnds:
    """A table's committed rows as a :class:`~onceproof.sinks.base.CommittedEnd`: ``{0: count(*)}`` at READ
    COMMITTED on one autocommit connection, which grows only when a writing transaction commits. Raises
    psycopg's ``OperationalError`` when the database cannot be reached."""

    poll_s = 0.02

    def __init__(self, location: OutputLocation):
        self.conn = psycopg.connect(location.dsn, autocommit=True, connect_timeout=10)
        self.query = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(location.topic))

    def read(self) -> dict[int, int]:
        try:
            return {0: int(self.conn.execute(self.query).fetchone()[0])}
        except psycopg.errors.UndefinedTable:
            return {0: 0}  # the job has not created its table yet

    def close(self) -> None:
        """Close the connection; never raises."""
        try:
            self.conn.close()
        except psycopg.Error:
            pass
