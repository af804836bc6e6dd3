"""What a workload is (Jepsen's ``workload`` map: generator, client, checker), for a Kafka → Spark →
Kafka pipeline: one module per workload holds

* the **client** that drives the input topic and writes the history (``invoke``/``ok``/``fail``/``info``
  ops, ``store/history.py``), with the generator inside it;
* the **transform** the pipeline applies between the Kafka source and the sink (``onceproof/job.py``
  calls it), with the Spark settings and the output mode it needs;
* the **decoder** of output values into checker columns;
* its **checker**: history, input and output frames in, a result dict out (the shape of
  ``onceproof.checkers.exactly_once.check``'s, so ``checkers/compose.py`` adds the transaction checks to it).

A new workload is a module under ``workloads/`` and one line in ``workloads/registry.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # the pipeline imports this module on the driver, where pandas may be absent (Docker)
    import pandas as pd


class Client(Protocol):
    """A running workload client (``onceproof.workloads.keyed.KeyedWorkload``): sends until :meth:`stop`."""

    stats: Any
    errors: list[str]
    stopped_by: str | None
    """Why the client stopped sending before :meth:`stop` was called (a bug in the client, not a
    client error: ``"HH:MM:SS <the exception>"``); ``None`` while it sends."""

    def start(self) -> None: ...

    def stop(self, timeout_s: float | None = None) -> None: ...

    def new_errors(self) -> list[str]: ...


class Workload(Protocol):
    """One workload.

    Attributes:
        name: what ``--workload`` calls it.
        summary: one line for ``--help``.
        output_mode: Spark's output mode for the query (``append``, ``update``).
        spark_conf: Spark settings the transform needs (e.g. the state store provider), applied when the
            session is built.
        input_refs: the transform's rows carry ``in_partition``/``in_offset`` (the input record's Kafka
            partition and offset), which the sinks turn into the ``op.input`` provenance header and the
            eos sink's completeness guard needs (``pipeline/completeness.py``).
    """

    name: str
    summary: str
    output_mode: str
    spark_conf: dict[str, str]
    input_refs: bool

    def client(self, bootstrap: str, topic: str, history, *, rate: float, keys: int, seed: int,
               producer: str = "transactional", input_aborts: float | None = None) -> Client:
        """The generator and client writing ``rate`` records/s over ``keys`` keys into ``topic``, recording
        ops in ``history`` (a ``onceproof.store.history.HistoryWriter``), sending with ``producer``
        (``workloads/producers.py``), aborting ``input_aborts`` of its transactions on purpose (a
        transactional producer; ``None``: its default); not started."""

    def transform(self, src):
        """The pipeline's transform: Spark's Kafka source frame (``key``, ``value``, ``partition``,
        ``offset``, ``timestamp``, ...) → ``key: string, value: binary`` (+ ``in_partition``,
        ``in_offset`` when :attr:`input_refs`). Runs on the driver (imports pyspark)."""

    def decode(self, frame: pd.DataFrame) -> pd.DataFrame:
        """Raw records (``onceproof.clients.topics.read_topic``'s frame, ``value`` bytes) → checker columns."""

    def check(self, history: pd.DataFrame, input: pd.DataFrame, output: pd.DataFrame, recovery=None) -> dict:
        """The workload's checker: ``{"verdict", "valid", "counts", "anomalies", "stats", "unknown_reasons",
        "definite", ...}`` as ``onceproof.checkers.exactly_once.check`` returns."""
