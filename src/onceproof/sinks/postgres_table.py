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
from onceproof.pipeline.postgres_sink import COLUMNS, PROGRESS_TABLE
from onceproof.sinks.base import OutputError, OutputLocation, OutputView

SELECT = "SELECT id, key, seq, in_partition, in_offset, in_ts, batch_id, incarnation FROM {} ORDER BY id"


def _frame(rows: list[tuple]) -> pd.DataFrame:
    """Rows ``(id, key, seq, in_partition, in_offset, in_ts, batch_id, incarnation)`` as the checker's
    output frame: ``partition`` 0 and ``offset`` = ``id``, the value fields decoded as a Kafka record's JSON
    value is, ``batch_id`` and ``incarnation`` as the provenance columns a Kafka record's headers give."""
    n = len(rows)
    values = np.array([json.dumps(dict(zip(COLUMNS, r[1:6], strict=True))).encode() for r in rows], dtype=object)
    base = pd.DataFrame({"partition": np.zeros(n, dtype=np.int32),
                         "offset": np.array([r[0] for r in rows], dtype=np.int64),
                         "key": pd.array([r[1] for r in rows], dtype="string"),
                         "value": values if n else np.empty(0, object)})
    out = decode_values(base)
    if {"in_partition", "in_offset"} <= set(out.columns):
        ip = pd.to_numeric(out["in_partition"], errors="coerce").astype("Int64")
        io = pd.to_numeric(out["in_offset"], errors="coerce").astype("Int64")
        ref = ip.astype("string") + ":" + io.astype("string")
        out[provenance.INPUT] = ref.astype(object).where(ref.notna(), None)
    out[provenance.BATCH] = pd.array([None if r[6] is None else str(r[6]) for r in rows], dtype=object)
    out[provenance.INCARNATION] = pd.array([r[7] for r in rows], dtype=object)
    return out


def read_output(location: OutputLocation) -> OutputView:
    """The table named ``location.topic`` in the database at ``location.dsn`` into an
    :class:`~onceproof.sinks.base.OutputView`: ``committed`` = ``uncommitted`` = the snapshot's rows (a
    database shows no uncommitted rows to another session); ``summary`` names the table, the rows, the
    snapshot (``pg_current_snapshot()``) and the progress rows seen.

    Raises: :class:`~onceproof.sinks.base.OutputError` when the database cannot be reached or the table is
    missing, naming which."""
    if not location.dsn:
        raise OutputError("no database to read: this run's sink writes PostgreSQL, and the check was given no "
                          "connection string (re-check a stored run from its snapshots: onceproof check RUN_DIR)")
    try:
        with psycopg.connect(location.dsn, connect_timeout=10) as conn:
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            conn.read_only = True
            with conn.transaction():
                snapshot = conn.execute("SELECT pg_current_snapshot()::text").fetchone()[0]
                rows = conn.execute(sql.SQL(SELECT).format(sql.Identifier(location.topic))).fetchall()
                exists = conn.execute("SELECT to_regclass(%s)", (PROGRESS_TABLE,)).fetchone()[0]
                progress = (conn.execute(sql.SQL("SELECT app_id, batch_id FROM {}").format(
                    sql.Identifier(PROGRESS_TABLE))).fetchall() if exists else [])
    except psycopg.errors.UndefinedTable as e:
        raise OutputError(f"table {location.topic} is not in the database: the job wrote nothing ({e})") from e
    except psycopg.Error as e:
        raise OutputError(f"cannot read table {location.topic} from PostgreSQL ({type(e).__name__}: {e})") from e
    frame = _frame(rows)
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
