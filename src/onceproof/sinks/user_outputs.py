"""What a user's ``--pipeline-cmd`` job may write, chosen with ``--output``: one
:class:`~onceproof.sinks.base.Sink` entry each, without a writer (the job writes it), with the reader of
its commit point, kept in its sink's module and imported only when chosen, and the placeholders of the
command that name where it is (``backends/user_pipeline.py``).

* ``kafka`` (the default): the ``{output_topic}`` topic, read at read_committed.
* ``files``: Spark's file sink (JSON lines) in ``{output_path}``, read through its ``_spark_metadata``
  log (``sinks/file_log.py``).
* ``delta``: a Delta Lake table in ``{output_path}``, read at its latest committed version through its
  ``_delta_log`` (``sinks/delta_table.py``).
* ``postgres``: the table ``{output_table}`` in the database ``{postgres_dsn}``, a server the run starts
  (``backends/common/postgres.py``), read in one ``REPEATABLE READ`` snapshot (``sinks/postgres_table.py``).
* ``iceberg``: the Apache Iceberg table ``{output_table}`` in the catalog whose Spark settings
  ``{iceberg_conf}`` holds (a Hadoop catalog whose warehouse is in the run directory), read at its
  current snapshot with pyiceberg (``sinks/iceberg_table.py``).

``docs/pipeline-contract.md`` says what a job must keep for each.
"""

from __future__ import annotations

import pkgutil
from dataclasses import dataclass

from onceproof.sinks import registry
from onceproof.sinks.base import Sink


@dataclass(frozen=True)
class Output:
    """One ``--output``: its sink entry as ``module:attribute`` (:meth:`entry` imports it), a line for
    ``--help``, and the ``placeholders`` only it gives a value to (a command using another output's is
    refused)."""

    where: str
    summary: str
    placeholders: frozenset[str] = frozenset()

    def entry(self) -> Sink:
        """The sink entry the run reads (imported now)."""
        return pkgutil.resolve_name(self.where)


OUTPUTS: dict[str, Output] = {
    "kafka": Output("onceproof.sinks.kafka_eos:USER_TOPIC", "a Kafka topic, {output_topic}, read at read_committed"),
    "files": Output("onceproof.sinks.files:USER_FILES", "Spark's file sink in {output_path}, read through its "
                    "_spark_metadata log", frozenset({"output_path"})),
    "delta": Output("onceproof.sinks.delta:USER_TABLE", "a Delta Lake table in {output_path}, read at its latest "
                    "committed version (its _delta_log)", frozenset({"output_path"})),
    "postgres": Output("onceproof.sinks.postgres:USER_TABLE", "a PostgreSQL table, {output_table} in "
                       "{postgres_dsn} (a server the run starts), read at REPEATABLE READ",
                       frozenset({"postgres_dsn", "output_table"})),
    "iceberg": Output("onceproof.sinks.iceberg:USER_TABLE", "an Apache Iceberg table, {output_table} in the catalog "
                      "{iceberg_conf} defines (a file-system catalog in the run directory), read at its current "
                      "snapshot", frozenset({"iceberg_conf", "output_table"})),
}
DEFAULT = "kafka"
OWN_PLACEHOLDERS = frozenset().union(*(o.placeholders for o in OUTPUTS.values()))
"""The placeholders that belong to one output or another."""


def names() -> list[str]:
    """The ``--output`` choices, in order (imports nothing)."""
    return list(OUTPUTS)


def get(name: str) -> Output:
    """The output called ``name``. Raises ``ValueError`` naming the choices."""
    if name not in OUTPUTS:
        raise ValueError(f"unknown output {name!r}; choose one of {', '.join(OUTPUTS)}")
    return OUTPUTS[name]


def misplaced(name: str, used: frozenset[str] | set[str]) -> dict[str, str]:
    """``{placeholder: the outputs it belongs to ("files or delta")}`` for each of ``used`` that
    ``--output name`` gives no value to. Raises ``ValueError`` for an unknown ``name``."""
    mine = get(name).placeholders
    return {p: " or ".join(n for n, o in OUTPUTS.items() if p in o.placeholders)
            for p in sorted(set(used) & OWN_PLACEHOLDERS - mine)}


def entry_of(config: dict) -> Sink | None:
    """The sink entry a stored run's ``test.json`` config wrote: its ``--output`` for a ``--pipeline-cmd``
    run, else its ``--sink``; ``None`` for one that names neither (an older run, a check run)."""
    if config.get("pipeline_cmd"):
        out = OUTPUTS.get(str(config.get("output") or DEFAULT))
        return out.entry() if out else None
    return registry.find(config.get("sink"))


def output_lines(result: dict) -> list[str]:
    """The lines the sink entries (``--sink``'s and ``--output``'s) print about their output in a check's
    ``result`` (e.g. the file sink's files and orphans, a Delta table's version); ``[]`` when none has a
    summary there. One line per summary key."""
    return [line for s in _by_result_key().values() for line in s.report_lines(result)]


def output_tables(result: dict) -> list[tuple[str, list[dict]]]:
    """The tables the sink entries show about their output in a check's ``result`` (an Iceberg table's
    snapshots): ``[(title, rows)]``, ``[]`` when none has one."""
    return [t for s in _by_result_key().values() if (t := s.report_table(result))]


def _by_result_key() -> dict[str, Sink]:
    """Every sink entry (``--sink``'s and ``--output``'s) that stores a summary, by its key (imports them)."""
    return {s.result_key: s for s in [*registry.entries(), *(o.entry() for o in OUTPUTS.values())]
            if s.result_key}
