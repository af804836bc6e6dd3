"""MUTANTS: deliberately broken variants of the exactly-once sink. Never the default; never for real use.

Each mutant is the transactional sink (``pipeline/transactional_sink.py``) with **one** flaw switched on
(:class:`Flaws`), so that ``onceproof test-all --mutants`` can measure the harness's detection power:
a checker and nemesis that never see a mutant fail prove nothing when they call the real sink valid.
Every mutant names the fault package that targets its flaw and the anomaly it must produce; the
detection table (``report/certificate.py``) shows, per mutant × package, how many seeds caught it.

The flaws, and the protocol fact each one breaks:

* ``no_marker`` (``eos-no-marker``): the progress marker is never checked, so a replayed batch
  (a driver killed in the commit window, between the sink's commit and Spark's ``commits/N``) is
  written again → ``duplicate``.
* ``fresh_txn_id`` (``eos-no-fencing``): a new ``transactional.id`` per task attempt, so a retry never
  fences the attempt it replaces (KIP-98 fencing is per transactional.id, by producer epoch). A zombie
  attempt – a task whose executor Spark gave up on, still running – commits after its retry did
  → ``duplicate``. Targeted by ``zombie-task:precommit`` (``nemesis/zombie.py``).
* ``marker_first`` (``eos-marker-first``): the marker is committed in its own transaction *before* the
  data's transaction, so a task killed between the two leaves "batch done" with no data; the retry
  skips it → ``lost``. Targeted by ``kill-executor`` (which kills a task parked after ``flush()``).
* ``marker_equal`` (``eos-marker-equal``): a (batch, partition) is skipped only when the marker equals
  the batch, not when it is ≥. A zombie of batch N that starts after batch N+1 committed writes N
  again → ``duplicate``. Targeted by ``zombie-task:preinit``.
* ``no_abort_on_start`` (``eos-no-abort-on-start``): the query does not settle the id pool at start
  (Flink's abort-on-restore). Every task's own ``init_transactions()`` still aborts its id's leftover
  when it runs, so no record is duplicated or lost: the flaw is a liveness one. A transaction open at a
  driver kill pins the output's LSO until the replay's task of that partition runs, which
  ``restart-mid-txn`` holds back → ``leftover-transaction`` (``checkers/liveness.py``). Its cells run
  with ``transaction.timeout.ms`` = 120 s (:attr:`Mutant.run_args`; Flink's Kafka sink docs recommend
  far more): with the default 30 s the coordinator itself may abort the leftover about when the
  restarted query starts (a restart takes ~20 s on 2 cores), hiding the flaw.
* ``nondeterministic`` (``eos-nondeterministic``): the batch is re-split across sink partitions at
  random (``repartition`` by ``rand()``) before writing, so a replay or a retried stage puts rows in
  other partitions than the attempt that committed part of the batch: the marker skips rows never
  written and rewrites rows already written → ``lost`` and ``duplicate``. Targeted by a restart on a
  partly committed batch (``upgrade``, whose turns always land there).
* ``commit_error_ignored`` (``eos-commit-error-ignored``): once the rows are flushed, an error of the
  last steps (``send_offsets_to_transaction()``, ``commit_transaction()``) is taken for success, so the
  task returns and Spark writes ``commits/N`` for a batch whose transaction the
  coordinator aborted at ``transaction.timeout.ms`` (the danger Flink's Kafka connector docs and
  SPARK-28908 name: a transaction timed out after the engine counted the batch as written loses it)
  → ``lost``. Targeted by ``commit-delay:txn-timeout``, which holds a task's open transaction past the
  timeout.

  It replaces ``eos-short-txn-timeout`` (``transaction.timeout.ms`` below the faults' holds), which no
  checker can catch in this sink: each task begins, writes and commits its transaction itself, so a
  timeout only aborts work whose task then fails and is retried. The mutant that would show the danger
  directly is a two-phase sink (pre-commit on executors, commit when the driver's ``commit(batchId)``
  runs), and librdkafka cannot build it: a transaction can only be committed by the producer instance
  that began it (no resume by producer id and epoch, which Flink does through the Java client's
  internals, and no KIP-939 two-phase commit), and nothing routes the driver's commit to the Python
  worker that still holds that producer. The replacement breaks the same rule — never count a batch as
  written unless its commit is known to have succeeded — where this sink can break it.
* ``index_keyed`` (``eos-index-keyed``): the sink before issue 10's fix: marker and ``transactional.id``
  keyed by Spark's partition *index*. A restart that splits a replayed batch differently
  (``upgrade:min-partitions``) skips rows never committed and rewrites committed ones.
* ``long_lived_producer`` (``eos-long-lived-producer``): one producer per Python worker (``transactional.id``
  ``<sink_id>-worker-<pid>``) reused for every task the worker runs, ``init_transactions()`` called once,
  discarded only after a failed attempt: the optimisation users reach for (Spark's own Kafka sink caches its
  producers per executor; it saves an InitProducerId round trip per transaction). (Keyed by the partition's id
  instead, the two workers of the local cluster fenced each other's producer whenever a partition's task moved:
  43 producers made for 35 reused in the first run, so few consecutive transactions shared an epoch.) It gives
  up the sink's defence against KAFKA-17754: librdkafka speaks transaction protocol v1 (no KIP-890 part 2,
  confluentinc/librdkafka#5423), so consecutive transactions of one producer share an epoch, and a request of
  one transaction that librdkafka timed out and retried internally (never an error to the application) can
  reach its broker during the *next* transaction: a delayed EndTxn(COMMIT) commits the next transaction
  half-written, whose task then fails and is replayed → ``duplicate``. Targeted by ``delay-txn-requests``
  (``nemesis/stale_request.py``), whose package ``stale-requests`` its cells run under, with
  ``transaction.timeout.ms`` = 300 s so that the coordinator's own timeout (which bumps the epoch) never
  fences the delayed request first. Not yet caught in the pipeline (``docs/kafka17754.md``: 5 runs, 10 turns
  effective, 8 exercised, all valid; with librdkafka's defaults a held commit ended only when its held copy
  arrived, never through a resend), so ``caught`` is False and ``test-all --mutants`` leaves it out; the
  client-level probe shows the flaw itself.
* ``short_socket_timeout`` (with ``long_lived_producer``: ``eos-long-lived-fast-failover``): the same producer
  with ``socket.timeout.ms`` at 5 s, as users set for fast failover (and as the client-level probe runs): a
  held EndTxn times out and is resent on a new connection while its first copy is still held, so the commit
  completes and the next transactions begin under the same epoch before the held copy arrives.

* ``read_uncommitted`` (``eos-read-uncommitted``): not a flaw of the sink but of its source, the most common
  real one: Spark's Kafka source without ``kafka.isolation.level=read_committed`` reads at
  read_uncommitted (Spark's "Structured Streaming + Kafka Integration Guide": Kafka's own consumer default),
  so the records of input transactions that abort (the workload aborts some on purpose, ``--input-aborts``)
  and of open ones are copied to the output → ``aborted-input-read``.

Pure data: no pyspark or Kafka import.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Flaws:
    """The flaws a sink runs with; all off is the correct sink. Picklable (part of ``SinkConfig``)."""

    no_marker: bool = False
    fresh_txn_id: bool = False
    marker_first: bool = False
    marker_equal: bool = False
    no_abort_on_start: bool = False
    nondeterministic: bool = False
    commit_error_ignored: bool = False
    index_keyed: bool = False
    long_lived_producer: bool = False
    short_socket_timeout: bool = False
    read_uncommitted: bool = False

    @property
    def any(self) -> bool:
        return any(getattr(self, f) for f in self.__dataclass_fields__)


@dataclass(frozen=True)
class Mutant:
    """One mutant sink: its ``--sink`` name, its flaw (a :class:`Flaws` field, or several joined by ``+``),
    what it breaks, the fault
    package (``nemesis/packages.py``) that targets it and the anomaly it must produce there."""

    name: str
    flaw: str
    summary: str
    package: str
    anomaly: str
    run_args: tuple[str, ...] = ()
    """Further ``onceproof run`` options of this mutant's test-all cells (the conditions its flaw shows in)."""
    caught: bool = True
    """False while no run of its package has caught it: ``test-all --mutants`` then leaves it out (the detection
    table claims only what the harness catches); ``--sink`` still runs it by name."""

    @property
    def flaws(self) -> Flaws:
        """The :class:`Flaws` of :attr:`flaw` (``a+b``: several fields at once)."""
        return Flaws(**{f: True for f in self.flaw.split("+")})


MUTANTS: dict[str, Mutant] = {m.name: m for m in (
    Mutant("eos-no-marker", "no_marker", "the transactional sink without its replay marker check",
           "commit", "duplicate"),
    Mutant("eos-no-fencing", "fresh_txn_id", "a fresh transactional.id per task attempt: zombies are not fenced",
           "process", "duplicate"),
    Mutant("eos-marker-first", "marker_first", "the marker committed in its own transaction before the data",
           "process", "lost"),
    Mutant("eos-marker-equal", "marker_equal", "skips a batch only when marker == batchId, not ≥",
           "process", "duplicate"),
    Mutant("eos-no-abort-on-start", "no_abort_on_start", "a dead run's open transactions are not aborted at start",
           "process", "leftover-transaction", ("--txn-timeout-ms", "120000")),
    Mutant("eos-nondeterministic", "nondeterministic", "a batch is re-split across sink partitions at random",
           "upgrade", "lost"),
    Mutant("eos-commit-error-ignored", "commit_error_ignored",
           "a failed marker or commit step taken for success: a transaction aborted at transaction.timeout.ms "
           "counts as written", "commit", "lost"),
    Mutant("eos-index-keyed", "index_keyed", "marker and transactional.id keyed by Spark partition index "
           "(the sink before issue 10's fix)", "upgrade", "duplicate"),
    Mutant("eos-long-lived-producer", "long_lived_producer", "one producer per Python worker reused for every "
           "transaction (one epoch for many transactions: KAFKA-17754)", "stale-requests", "duplicate",
           ("--txn-timeout-ms", "300000"), caught=False),
    Mutant("eos-long-lived-fast-failover", "long_lived_producer+short_socket_timeout",
           "eos-long-lived-producer with socket.timeout.ms 5 s (fast failover): a timed-out EndTxn is resent "
           "while the first copy is still held (KAFKA-17754)", "stale-requests", "duplicate",
           ("--txn-timeout-ms", "300000"), caught=False),
    Mutant("eos-read-uncommitted", "read_uncommitted", "the bundled pipeline's Kafka source without "
           "kafka.isolation.level=read_committed: aborted input transactions are copied", "commit",
           "aborted-input-read"),
)}


def run_args(sink: str) -> tuple[str, ...]:
    """The further ``onceproof run`` options of sink ``sink``'s test-all cells (a mutant's; ``()`` else)."""
    m = MUTANTS.get(sink)
    return m.run_args if m else ()


def flaws_of(sink: str) -> Flaws:
    """The flaws of sink ``sink``: a mutant's, else none (the correct sink, or a sink that is not eos)."""
    m = MUTANTS.get(sink)
    return m.flaws if m else Flaws()


def source_isolation(sink: str) -> str:
    """The ``kafka.isolation.level`` the bundled pipeline's Kafka source reads the input at when writing
    sink ``sink``: ``read_uncommitted`` for a mutant with the ``read_uncommitted`` flaw, else
    ``read_committed``."""
    return "read_uncommitted" if flaws_of(sink).read_uncommitted else "read_committed"
