"""``--sink postgres`` (one database transaction per micro-batch with a progress row, expected valid) and
``--sink postgres-autocommit`` (a mutant: autocommit inserts per executor partition, expected invalid).

The job writes them with ``onceproof.pipeline.postgres_sink`` into the table named like the output topic
in the run's PostgreSQL database (:attr:`~onceproof.sinks.base.Sink.database`: the backend starts the
server, ``backends/common/postgres.py``); the checker reads that table in one ``REPEATABLE READ``
snapshot (``onceproof.sinks.postgres_table``).
"""

from __future__ import annotations

from onceproof.pipeline import postgres_sink
from onceproof.sinks.base import DRIVER_HOOKS, JobContext, JobPlace, Sink

READER = "onceproof.sinks.postgres_table:read_output"


def _start(df, job: JobContext, body):
    a = job.args
    if not a.database_dsn:
        raise SystemExit(f"--sink {job.sink.name} needs --database-dsn (the run's PostgreSQL database)")
    postgres_sink.create_tables(a.database_dsn, a.output_topic)
    return job.foreach_batch(df, body)


def write_transactional(df, job: JobContext):
    """The ``postgres`` :class:`~onceproof.sinks.base.Writer`. Raises ``SystemExit`` without
    ``--database-dsn``, psycopg's errors when the database cannot be reached."""
    a = job.args
    body = postgres_sink.transactional_batch(a.database_dsn, a.output_topic, job.sink_id, job.incarnation,
                                             job.control, job.event_log())
    return _start(df, job, body)


def write_autocommit(df, job: JobContext):
    """The ``postgres-autocommit`` mutant's :class:`~onceproof.sinks.base.Writer` (raises as
    :func:`write_transactional`)."""
    a = job.args
    body = postgres_sink.autocommit_partitions(a.database_dsn, a.output_topic, job.incarnation, job.control,
                                               job.event_log())
    return _start(df, job, body)


def report_line(summary: dict) -> str:
    """One line on the output (``result["postgres"]``): the table, its rows, the snapshot read and the
    bundled sinks' progress rows (when there are any)."""
    progress = f", {summary['progress_rows']} progress rows" if summary.get("progress_rows") else ""
    return (f"postgres table {summary.get('table')}: {summary.get('rows')} rows read at REPEATABLE READ "
            f"(snapshot {summary.get('snapshot')}){progress}")


_COMMON = dict(reader=READER, output_modes=frozenset({"append"}), database="postgres", result_key="postgres",
               report_line=report_line, committed_end="onceproof.sinks.postgres_table:RowCountEnds")

POSTGRES = Sink("postgres", "a PostgreSQL table: one transaction per micro-batch with a progress row "
                            "(pipeline/postgres_sink.py)", frozenset({DRIVER_HOOKS}), "valid",
                writer=write_transactional, label="the PostgreSQL sink", **_COMMON)

AUTOCOMMIT = Sink("postgres-autocommit", "a mutant: autocommit inserts per executor partition, no progress row",
                  frozenset({DRIVER_HOOKS}), "invalid", writer=write_autocommit,
                  label="the postgres-autocommit mutant", targeted_by="commit", mutant=True, **_COMMON)


def job_values(place: JobPlace) -> dict[str, str]:
    """The placeholders a user's ``--output postgres`` job gets: ``postgres_dsn`` (the run's server) and
    ``output_table`` (named like the run's output topic, as the bundled sinks' table)."""
    return {"postgres_dsn": place.dsn, "output_table": place.output_topic}


USER_TABLE = Sink("postgres", "your job's PostgreSQL table", frozenset(), "valid", writer=None,
                  label="your job's PostgreSQL table", job_values=job_values, **_COMMON)
"""``--pipeline-cmd ... --output postgres``: the table a user's job writes, ``{output_table}`` in
``{postgres_dsn}`` (``sinks/user_outputs.py``); read as :data:`POSTGRES`."""
