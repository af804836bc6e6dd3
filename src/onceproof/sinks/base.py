"""What a sink is: one :class:`Sink` entry (``sinks/registry.py`` lists them by ``--sink`` name).

An entry owns everything about its sink, so that no other module branches on a sink's name:

* how the bundled job (``onceproof.job``) writes it: :attr:`Sink.writer`, a :class:`Writer`
  given the job's frame and :class:`JobContext`; ``None`` when the user's job writes it;
* which server it writes, when it writes a database (:attr:`Sink.database`: the run starts one through
  the backend's ``Databases``, ``backends/base.py``, and hands its DSN to the job and the reader);
* how the checker reads its committed state: :attr:`Sink.reader`, an :class:`OutputReader` named as
  ``module:attribute`` and imported only when a check needs it (readers use pandas, which the job's
  driver and executors do not have);
* which faults it can take: :attr:`Sink.capabilities`, keys of :data:`CAPABILITIES`, against each fault's
  ``sink_needs`` (``onceproof.nemesis.catalog.sink_needs``);
* the verdict a faulted run is expected to reach (:attr:`Sink.expect`) and the fault package aimed at
  its flaw (:attr:`Sink.targeted_by`, ``nemesis/packages.py``).

Pure data and protocols: no pyspark, pandas or Kafka import.
"""

from __future__ import annotations

import argparse
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # types only: pandas is not importable where the job runs
    import pandas as pd

    from onceproof.pipeline.hooks import ControlDir
    from onceproof.workloads.base import Workload

TRANSACTIONS = "transactions"
PRECOMMIT_HOOK = "precommit-hook"
DRIVER_HOOKS = "driver-hooks"
WRITE_HOLD = "write-hold"

CAPABILITIES = {
    TRANSACTIONS: "Kafka transactions (KIP-98: no transaction coordinator, no transaction.timeout.ms)",
    PRECOMMIT_HOOK: "pre-commit hook (pipeline/hooks.py: between flush() and commit_transaction())",
    DRIVER_HOOKS: "after-commit hook in the driver (pipeline/hooks.py: before Spark's commits/N)",
    WRITE_HOLD: "hold of a task in the middle of its writes (pipeline/file_sink.py)",
}
"""What a fault can use of a sink, as a message names what a sink without it lacks. A fault that works
through a sink's protocol (a Kafka transaction to time out, a transaction coordinator to kill, a
pre-commit hook to park a task in) proves nothing against a sink without it and uses up the run's time,
so ``harness/config.py`` refuses it (or leaves it out of ``--nemesis all``)."""

COMMITTED = "committed"
"""The read every sink offers: its committed state (a Kafka topic at read_committed, the files a commit
log lists, a table's committed version)."""


ORDER_RANK = "order_rank"
"""An output frame's optional column of the order a user can read, when ``(partition, offset)`` is not
one: an integer rank (a Delta commit version, a file sink's batch id), rows of one rank in no order
among themselves, NA for a row with none. Without the column, ``(partition, offset)`` is the order (a
topic's offsets, a table's ``id``); with it all NA, the output has no order and the per-key order is not
judged (``checkers/exactly_once.py``, ``nonmonotonic``). Physical order (``ctid``, a file listing) is
never an order."""


class OutputError(ValueError):
    """A sink's output cannot be read (missing, damaged, not the sink's format); the message names it
    and what to do. ``onceproof.checking.checks`` reports it as a ``CheckError``."""


@dataclass(frozen=True)
class JobContext:
    """What a :class:`Writer` gets from the bundled job besides the frame: ``args`` (the job's options,
    ``onceproof.job.parse_args``: ``bootstrap``, ``output_topic``, ``checkpoint``,
    ``trigger_ms``, ``file_sink_path``, ...), the ``sink`` entry being written, ``sink_id`` (prefix of
    transactional ids and marker groups), the driver ``incarnation``, ``pool`` (the transactional-id
    pool size: the input topic's partitions), ``control`` (the fault hooks, ``pipeline/hooks.py``) and
    the ``workload`` (its ``output_mode``, ``input_refs``)."""

    args: argparse.Namespace
    sink: Sink
    sink_id: str
    incarnation: str
    pool: int
    control: ControlDir
    workload: Workload

    @property
    def query_name(self) -> str:
        """The streaming query's name: ``onceproof-<sink>``."""
        return f"onceproof-{self.sink.name}"

    def event_log(self) -> Callable[..., None]:
        """``log(event, **fields)``: one ``sink.jsonl`` event of this sink and driver incarnation
        (``onceproof.pipeline.transactional_sink.event_log``)."""
        from onceproof.pipeline.transactional_sink import event_log  # the job's side only

        return event_log(self.args.sink_log, self.incarnation, self.sink.name)

    def foreach_batch(self, df: Any, body: Callable[[Any, int], None]) -> Any:
        """Start ``df``'s query with ``body(batch_df, batch_id)`` as its ``foreachBatch`` (the Kafka sinks'
        shape), in the workload's output mode, on the job's checkpoint and trigger; returns the query."""
        return (df.writeStream.foreachBatch(body).outputMode(self.workload.output_mode)
                .option("checkpointLocation", self.args.checkpoint)
                .trigger(processingTime=f"{self.args.trigger_ms} milliseconds")
                .queryName(self.query_name)
                .start())


class Writer(Protocol):
    """Starts the streaming query that writes ``df`` (the workload's transform of the input) to the sink
    and returns it (a ``pyspark.sql.streaming.StreamingQuery``). Runs in the job's driver."""

    def __call__(self, df: Any, job: JobContext) -> Any: ...


@dataclass(frozen=True)
class JobPlace:
    """Where a user's ``--pipeline-cmd`` job writes its ``--output``, for the placeholders
    :attr:`Sink.job_values` gives it: ``directory``, the output directory under the run directory
    (:attr:`Sink.output_dir`; ``None`` for none); ``output_topic``, the run's output topic, which a
    database table is named after; ``dsn``, the libpq connection string of the database the run started
    ("" for none)."""

    directory: Path | None = None
    output_topic: str = ""
    dsn: str = ""


def path_values(place: JobPlace) -> dict[str, str]:
    """The placeholder of a user's ``--output files`` or ``delta`` job: ``{output_path}``, its output
    directory."""
    return {"output_path": str(place.directory or "")}


@dataclass(frozen=True)
class OutputLocation:
    """Where a run's output is: the Kafka cluster and output topic, and ``directory`` (the sink's
    output directory, :attr:`Sink.output_dir` under the run directory; ``None`` for a topic).
    ``workload`` decodes the records; ``read`` is the view the checker judges (one of the sink's
    :attr:`Sink.reads`); ``timeout_s`` bounds a topic read, s; ``chunk`` is a topic read's messages per
    chunk (``onceproof.clients.topics.READ_CHUNK`` when ``None``). ``dsn``: the libpq connection string of
    the database a sink with a :attr:`Sink.database` writes; its table is named like ``topic``."""

    bootstrap: str = ""
    topic: str = ""
    directory: Path | None = None
    workload: str = "keyed"
    read: str = COMMITTED
    timeout_s: float = 300.0
    chunk: int | None = None
    dsn: str = ""
    order_column: str = ""
    """A table's column that gives its rows' commit or insertion order (``--order-column``); "" = the
    reader's default (``id`` when present)."""


@dataclass
class OutputView:
    """What an :class:`OutputReader` read.

    ``committed``: the checker's output frame (the view ``read`` asked for: the committed one unless the
    sink offers another, e.g. a file listing); ``uncommitted``: everything written, committed or not, at
    least ``partition``/``offset`` (it tells which records the committed view hid); ``unsettled``: why the
    output is not settled yet (an incomplete read, a torn commit), which makes a live check's recovery
    unfinished; ``problems``: oddities that did not stop the read; ``stats``: counts merged into
    ``result["stats"]``; ``summary``: stored as ``result[result_key]`` when ``result_key`` is set."""

    committed: pd.DataFrame
    uncommitted: pd.DataFrame
    unsettled: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    stats: dict = field(default_factory=dict)
    summary: dict | None = None
    result_key: str | None = None

    def record(self, result: dict) -> dict:
        """Put :attr:`stats` and :attr:`summary` into the check's ``result``; returns it."""
        if self.stats:
            result.setdefault("stats", {}).update(self.stats)
        if self.result_key and self.summary is not None:
            result[self.result_key] = self.summary
        return result


class CommittedEnd(Protocol):
    """The output's committed end, polled by the hook-free commit-window kill
    (``onceproof.nemesis.commit_window``) to see a micro-batch's output become visible before Spark's
    ``commits/N``: ``read()`` returns ``{partition: end}`` (a Kafka partition's LSO; the batches in a file
    sink's log; a table's committed rows), growing exactly when the sink commits. ``poll_s``: the interval
    it is cheap enough to be polled at, s. An optional ``settle_s`` (default 0): how long after a batch's
    ``offsets/N`` appears growth may still be the previous batch's, s (a Kafka topic's commit markers land
    after the commit returned: ``sinks/kafka_topic.OutputEnds``). ``read`` may raise while a fault is under
    way; ``close`` ends the polling."""

    poll_s: float

    def read(self) -> dict[int, int]: ...

    def close(self) -> None:
        """Release what it holds (a connection); never raises."""


class OutputReader(Protocol):
    """Reads a run's output at ``location`` into an :class:`OutputView`. Raises :class:`OutputError`
    naming what is missing or damaged."""

    def __call__(self, location: OutputLocation) -> OutputView: ...


@dataclass(frozen=True)
class Sink:
    """One sink of the bundled pipeline (``--sink``).

    ``name``: its ``--sink`` name. ``summary``: one line for ``--help``. ``label``: how messages name it
    ("Spark's file sink"). ``capabilities``: keys of :data:`CAPABILITIES`. ``expect``: ``valid``
    (exactly once) or ``invalid`` (a weak sink or a mutant the harness must catch). ``targeted_by``: the
    fault package (``nemesis/packages.py``) aimed at its flaw, ``None`` for a sink without one.
    ``writer``: what the bundled job calls (:class:`Writer`), ``None`` when the user's job writes it.
    ``reader``: its :class:`OutputReader` as ``module:attribute``. ``output_dir``: the directory the
    job writes under the run directory (``None`` for a Kafka topic); a backend must share it between
    executors and harness. ``reads``: the views its reader offers (``--file-read``), :data:`COMMITTED`
    first. ``output_modes``: the Spark output modes it takes. ``spark_conf``: Spark settings its writer
    needs, applied when the session is built. ``result_key`` and ``report_line``: the key of the reader's
    summary in ``result.json`` and the one line the console and the report print about it. ``mutant``:
    a deliberately broken sink (``pipeline/mutants.py``), never a default. ``database``: the kind of server
    it writes (``"postgres"``), started for the run by the backend; ``None`` for a topic or a directory.
    ``committed_end``: its :class:`CommittedEnd` as ``module:attribute``, a class built from an
    :class:`OutputLocation`. ``spark_runtime``: the PySpark version its writer needs when the harness's
    own will not do (Delta's connector supports older Sparks), run in a cached runtime the backend builds;
    ``None``: the harness's. ``jars``: classpaths of ``onceproof/deps/`` its writer needs beyond the Kafka
    connector (``"delta"``). ``job_values``: for a user's ``--output``, the placeholder values it gives
    the job's command beyond the run's own, from its :class:`JobPlace` (``{output_path}``, ``{postgres_dsn}``,
    ``{output_table}``, Iceberg's ``{iceberg_conf}``).
    ``report_rows``: the rows of a table the report shows about its output, from the reader's summary
    (``(title, [row dict])``: an Iceberg table's snapshots), ``None`` for none.
    """

    name: str
    summary: str
    capabilities: frozenset[str]
    expect: str
    writer: Writer | None
    reader: str
    label: str = ""
    targeted_by: str | None = None
    output_dir: str | None = None
    reads: tuple[str, ...] = (COMMITTED,)
    output_modes: frozenset[str] = frozenset({"append", "update"})
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    result_key: str | None = None
    report_line: Callable[[dict], str] | None = None
    mutant: bool = False
    database: str | None = None
    committed_end: str = "onceproof.sinks.kafka_topic:OutputEnds"
    spark_runtime: str | None = None
    jars: tuple[str, ...] = ()
    job_values: Callable[[JobPlace], Mapping[str, str]] | None = None
    report_rows: Callable[[dict], tuple[str, list[dict]]] | None = None

    def read(self, location: OutputLocation) -> OutputView:
        """The output at ``location`` through :attr:`reader` (imported now). Raises as the reader does."""
        reader: OutputReader = pkgutil.resolve_name(self.reader)
        return reader(location)

    def committed_ends(self, location: OutputLocation) -> CommittedEnd:
        """The :class:`CommittedEnd` of the output at ``location`` (imported now). Raises as its
        constructor does (e.g. the topic's metadata cannot be read)."""
        return pkgutil.resolve_name(self.committed_end)(location)

    def report_lines(self, result: dict) -> list[str]:
        """The line about this sink's output in ``result`` (:attr:`report_line` of
        ``result[result_key]``), or none."""
        summary = result.get(self.result_key) if self.result_key else None
        return [self.report_line(summary)] if summary and self.report_line else []

    def report_table(self, result: dict) -> tuple[str, list[dict]] | None:
        """The table about this sink's output in ``result`` (:attr:`report_rows` of ``result[result_key]``),
        or ``None``."""
        summary = result.get(self.result_key) if self.result_key else None
        return self.report_rows(summary) if summary and self.report_rows else None
