"""The committed state of a sink that writes a PostgreSQL table: the table in one ``REPEATABLE READ``
snapshot.

Under ``REPEATABLE READ`` every statement of a transaction sees the snapshot taken at its first statement
(postgresql.org/docs/15/transaction-iso.html), so the rows and the progress table are read at one commit
point, and nothing an open or rolled-back transaction wrote is counted, as Kafka's read_committed skips
aborted records. Rows come back in insertion order (``id``), which plays the output offset; duplicates
are rows of the same (key, seq), found by the exactly-once checker like duplicate Kafka records.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import psycopg
from psycopg import sql

from onceproof.clients.topics import decode_values
from onceproof.pipeline import provenance
from onceproof.pipeline.postgres_sink import PROGRESS_TABLE
from onceproof.sinks.base import OutputError, OutputLocation, OutputView

VALUE_COLUMNS = ("key", "seq", "in_partition", "in_offset", "in_ts")
"""Columns read into the record's value when the table has them (``key`` and ``seq`` it must have)."""
PROVENANCE = {"batch_id": provenance.BATCH, "incarnation": provenance.INCARNATION}
"""Columns read as provenance when present (the bundled sinks write them; a user's table may not)."""


def _frame(columns: list[str], rows: list[tuple]) -> pd.DataFrame:
    """Rows of ``columns`` (``key``, ``seq``, and any of ``id``, :data:`VALUE_COLUMNS`, :data:`PROVENANCE`)
    as the checker's output frame: ``partition`` 0 and ``offset`` = ``id`` (else the row's position in
    the read), the value columns decoded as a Kafka record's JSON value is (``op.input`` from
    ``in_partition``:``in_offset``), ``batch_id`` and ``incarnation`` as the provenance a Kafka record's
    headers give."""
    n = len(rows)
    raw = pd.DataFrame.from_records(rows, columns=columns) if n else pd.DataFrame(columns=columns)
    fields = [c for c in VALUE_COLUMNS if c in columns]
    values = np.array([json.dumps(dict(zip(fields, vals, strict=True)), default=str).encode()
                       for vals in raw[fields].itertuples(index=False, name=None)], dtype=object)
    base = pd.DataFrame({"partition": np.zeros(n, dtype=np.int32),
                         "offset": (raw["id"].to_numpy(dtype=np.int64) if "id" in columns
                                    else np.arange(n, dtype=np.int64)),
                         "key": pd.array(raw["key"].tolist(), dtype="string"),
                         "value": values if n else np.empty(0, object)})
    out = decode_values(base)
    if {"in_partition", "in_offset"} <= set(out.columns):
        ip = pd.to_numeric(out["in_partition"], errors="coerce").astype("Int64")
        io = pd.to_numeric(out["in_offset"], errors="coerce").astype("Int64")
        ref = ip.astype("string") + ":" + io.astype("string")
        out[provenance.INPUT] = ref.astype(object).where(ref.notna(), None)
    for col, name in PROVENANCE.items():
        if col in columns:
            out[name] = pd.array([None if v is None else str(v) for v in raw[col].tolist()], dtype=object)
    return out


def _columns(conn: psycopg.Connection, table: str) -> list[str]:
    """The columns to read of ``table``: ``id`` when present, ``key``, ``seq``, then the optional ones it
    has. Raises :class:`OutputError` when it is missing or lacks ``key`` or ``seq``."""
    have = {r[0] for r in conn.execute("SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                                       "AND table_schema = current_schema()", (table,)).fetchall()}
    if not have:
        raise OutputError(f"table {table} is not in the database: the job wrote nothing there (does it write "
                          f"{{output_table}}?)")
    missing = [c for c in ("key", "seq") if c not in have]
    if missing:
        raise OutputError(f"table {table} has no column {' or '.join(missing)}: each row must keep its record's "
                          f"key and seq (docs/pipeline-contract.md, --output postgres)")
    return [c for c in ("id", *VALUE_COLUMNS, *PROVENANCE) if c in have]


def read_output(location: OutputLocation) -> OutputView:
    """The table named ``location.topic`` in the database at ``location.dsn`` into an
    :class:`~onceproof.sinks.base.OutputView`: ``committed`` = ``uncommitted`` = the snapshot's rows (a
    database shows no uncommitted rows to another session), in ``id`` order when the table has one, else in
    physical (``ctid``) order; ``summary`` names the table, the rows, the snapshot
    (``pg_current_snapshot()``) and the bundled sinks' progress rows seen.

    Raises: :class:`~onceproof.sinks.base.OutputError` when the database cannot be reached, or the table is
    missing or lacks ``key``/``seq``, naming which."""
    if not location.dsn:
        raise OutputError("no database to read: this run's sink writes PostgreSQL, and the check was given no "
                          "connection string (re-check a stored run from its snapshots: onceproof check RUN_DIR)")
    try:
        with psycopg.connect(location.dsn, connect_timeout=10) as conn:
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            conn.read_only = True
            with conn.transaction():
                snapshot = conn.execute("SELECT pg_current_snapshot()::text").fetchone()[0]
                columns = _columns(conn, location.topic)
                query = sql.SQL("SELECT {} FROM {} ORDER BY {}").format(
                    sql.SQL(", ").join(map(sql.Identifier, columns)), sql.Identifier(location.topic),
                    sql.Identifier("id") if "id" in columns else sql.SQL("ctid"))
                rows = conn.execute(query).fetchall()
                exists = conn.execute("SELECT to_regclass(%s)", (PROGRESS_TABLE,)).fetchone()[0]
                progress = (conn.execute(sql.SQL("SELECT app_id, batch_id FROM {}").format(
                    sql.Identifier(PROGRESS_TABLE))).fetchall() if exists else [])
    except psycopg.Error as e:
        raise OutputError(f"cannot read table {location.topic} from PostgreSQL ({type(e).__name__}: {e})") from e
    frame = _frame(columns, rows)
    summary = {"table": location.topic, "rows": len(rows), "snapshot": snapshot, "isolation": "repeatable read",
               "progress_rows": len(progress), "progress": {a: int(b) for a, b in progress}}
    return OutputView(committed=frame, uncommitted=frame[["partition", "offset"]].copy(),
                      stats={"postgres_rows": len(rows)}, summary=summary, result_key="postgres")


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
