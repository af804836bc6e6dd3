"""``--sink postgres`` and its mutant: the keyed workload's rows written to a PostgreSQL table in
``foreachBatch``.

* :func:`transactional_batch` (``postgres``, expected valid): each micro-batch is collected on the driver
  and written in **one database transaction** with a progress row, ``(app_id) -> last batchId``, the rule
  of Delta's ``txnAppId``/``txnVersion`` (docs.delta.io, "Idempotent table writes in foreachBatch"). The
  app id is the run's sink id, stable across driver restarts. A replay of a batch whose transaction
  committed (the driver killed after the commit and before Spark's ``commits/N``) finds
  ``batch_id >= N`` and writes nothing; one killed before the commit was rolled back by the server when
  its connection closed. ``SELECT ... FOR UPDATE`` on the progress row serialises a restarted driver
  behind a transaction still open on the server.
* :func:`autocommit_partitions` (``postgres-autocommit``, a mutant expected invalid): every executor
  partition inserts its rows in autocommit mode, with no progress row: a replayed batch is inserted
  again, so the table holds two rows of one (key, seq).

Both call the driver's after-commit hook (``onceproof.pipeline.hooks.ControlDir.after_sink_commit``) once
the batch is in the table, before Spark writes ``commits/N``: ``kill-driver-in-commit-window`` kills
there. Table: ``id bigserial`` (the insertion order, read back as the output's offset), ``key``, ``seq``,
``in_partition``, ``in_offset``, ``in_ts``, ``batch_id`` and the driver ``incarnation`` (provenance).
"""

from __future__ import annotations

import functools

import psycopg
from psycopg import sql

from onceproof.pipeline import hooks, keyed_columns

COLUMNS = keyed_columns.COLUMNS
"""The keyed workload's value fields, written one column each (``batch_id`` is added)."""
PROGRESS_TABLE = "onceproof_progress"


def create_tables(dsn: str, table: str) -> None:
    """Create the output table and the progress table when missing (each driver start: idempotent)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (id bigserial PRIMARY KEY, key text, seq bigint, "
                             "in_partition bigint, in_offset bigint, in_ts bigint, batch_id bigint, incarnation text)")
                     .format(sql.Identifier(table)))
        conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (app_id text PRIMARY KEY, batch_id bigint NOT NULL)")
                     .format(sql.Identifier(PROGRESS_TABLE)))


def _copy(conn: psycopg.Connection, table: str, rows, batch_id: int, incarnation: str) -> int:
    n = 0
    copy = sql.SQL("COPY {} (key, seq, in_partition, in_offset, in_ts, batch_id, incarnation) FROM STDIN").format(
        sql.Identifier(table))
    with conn.cursor().copy(copy) as cp:
        for r in rows:
            cp.write_row((*r, batch_id, incarnation))
            n += 1
    return n


def transactional_batch(dsn: str, table: str, app_id: str, incarnation: str, control: hooks.ControlDir, log):
    """The ``foreachBatch`` body of the ``postgres`` sink (module docstring). ``log(event, **fields)``
    records ``commit``/``skip`` in ``sink.jsonl``. Raises psycopg's errors (Spark then fails the batch
    and the supervisor restarts the driver)."""

    def write(batch_df, batch_id: int) -> None:
        rows = keyed_columns.rows_of(batch_df).collect()
        with psycopg.connect(dsn) as conn, conn.transaction():
            done = conn.execute(sql.SQL("SELECT batch_id FROM {} WHERE app_id = %s FOR UPDATE")
                                .format(sql.Identifier(PROGRESS_TABLE)), (app_id,)).fetchone()
            if done is not None and done[0] >= batch_id:
                log("skip", batch=batch_id, committed_batch=done[0])
            else:
                n = _copy(conn, table, rows, batch_id, incarnation)
                conn.execute(sql.SQL("INSERT INTO {} (app_id, batch_id) VALUES (%s, %s) ON CONFLICT (app_id) "
                                     "DO UPDATE SET batch_id = EXCLUDED.batch_id")
                             .format(sql.Identifier(PROGRESS_TABLE)), (app_id, batch_id))
                log("commit", batch=batch_id, rows=n)
        control.after_sink_commit(batch_id)

    return write


def _insert_partition(dsn: str, table: str, batch_id: int, incarnation: str, rows) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        _copy(conn, table, rows, batch_id, incarnation)


def autocommit_partitions(dsn: str, table: str, incarnation: str, control: hooks.ControlDir, log):
    """The ``foreachBatch`` body of the ``postgres-autocommit`` mutant (module docstring): each executor
    partition's rows in one autocommit ``COPY``, no progress row."""

    def write(batch_df, batch_id: int) -> None:
        insert = functools.partial(_insert_partition, dsn, table, batch_id, incarnation)
        keyed_columns.rows_of(batch_df).foreachPartition(insert)
        log("commit", batch=batch_id)
        control.after_sink_commit(batch_id)

    return write
