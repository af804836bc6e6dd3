"""The exactly-once Kafka sink: one Kafka transaction per (micro-batch, sink partition), made idempotent
under replay by a progress marker committed in the same transaction (docs/architecture.md, "The exactly-once sink").

Why ``foreachBatch`` + ``foreachPartition`` rather than a Python data source writer
(``pyspark.sql.datasource.DataSourceStreamWriter``):

* ``foreachBatch`` hands us ``batchId`` through a public API. A data source writer only sees it through
  the internal task-local property ``streaming.sql.batchId``.
* It gives one driver-side point that runs after every sink task has committed and before Spark writes
  ``commits/<batchId>``: the commit-notification window the ``kill-driver-in-commit-window`` nemesis
  needs, on the same code path for both sinks (the at-least-once sink uses Spark's batch Kafka writer
  inside ``foreachBatch``).
* Both run the same per-partition tasks on executors, with the same retry semantics.

Per task, in this order (each step's reason in docs/architecture.md, "The exactly-once sink"):

1. ``transactional.id = <sink_id>-<partitionId>``; ``init_transactions()`` fences every older producer
   with that id (producer epoch bump, KIP-98) and aborts or completes its open transaction.
2. Read the marker (now stable). If it is ≥ ``batchId`` this partition of this batch is already in
   Kafka: skip. ≥, not ==, so that a zombie from an older batch never writes.
3. ``begin_transaction()`` → produce every row with provenance headers → ``flush()``.
4. Commit-delay hook (pre-commit window, ``pipeline/hooks.py``), then
   ``send_offsets_to_transaction(marker = batchId+1)`` and ``commit_transaction()``.

**No producer reuse (a deliberate choice, issue 11).** Every task attempt builds its own producer and
calls ``init_transactions()``, so every transaction runs under a fresh producer epoch. librdkafka speaks
transaction protocol v1 (no KIP-890 part 2 yet: https://github.com/confluentinc/librdkafka/issues/5423),
and under v1 a delayed Produce or EndTxn request of one transaction can land in the *next* transaction of
the same producer epoch: KAFKA-17754 (found by Jepsen), an aborted read, a lost write or a torn
transaction. The epoch bump per transaction is the defence #5423 proposes. Reusing a producer across
batches would save the ``init_transactions()`` round trip (``init_ms`` in ``sink.jsonl``: 30-700 ms, 150 ms
typical on 2 cores) but would give that defence up: ``make probe-kafka17754`` (``docs/kafka17754.md``) saw a
held EndTxn(COMMIT) commit the next transaction of a reused librdkafka producer on Kafka 4.1.1, and never with a
producer per transaction. The defence needs a broker with KIP-890 part 1 (Kafka 3.6+): on 3.5.2 a held Produce
request made an aborted record visible with a producer per transaction too. The throughput cost is measured in
``bench/pipeline_bench.py`` (eos ≥ at-least-once without reuse).

Errors, per librdkafka's classes (https://github.com/confluentinc/librdkafka/blob/master/INTRODUCTION.md
#transactional-producer): retriable → retry the call; ``txn_requires_abort()`` → abort, then fail the
task so Spark retries it; fatal (e.g. fenced) → fail the task. ``message.timeout.ms`` is kept below
``transaction.timeout.ms`` as librdkafka requires.

``sink.jsonl`` events (one JSON line each; every line has ``time`` (epoch s), ``event``, ``pid``,
``incarnation`` (the driver incarnation, ``ONCEPROOF_DRIVER_INCARNATION``) and, for a task, ``batch``,
``partition``, ``attempt``, ``txn_id``). An attempt is identified by (incarnation, batch, partition,
attempt): Spark numbers task attempts from 0 again in every new driver.

* ``fence-on-start`` – ``abort_leftovers`` settled the transactional id ``txn_id`` at query start.
* ``init-error`` – ``init_transactions()`` failed: no transaction of this attempt exists.
* ``producer-created`` / ``producer-reused`` – only under the ``eos-long-lived-producer`` mutant: the task's
  producer (the Python worker's one) was made and initialised now, or taken from the worker's earlier tasks
  (no ``init_transactions()``).
* ``marker-error`` – reading the marker failed (``error_class``, ``error_code``); no transaction began.
* ``skip`` – the marker (``marker``) is ≥ the batch: already committed, nothing written.
* ``begin`` – the transaction began; ``marker`` is the value read after ``init_transactions()``.
* ``hold`` – the pre-commit hold hook held this transaction (``hold_ms``).
* ``commit`` – ``commit_transaction()`` returned: committed.
* ``commit-unknown`` – ``commit_transaction()`` raised. The outcome is **unknown**: the EndTxn(COMMIT)
  request may have reached the transaction coordinator before the error (a timeout, a broker that died
  after writing the commit, a fenced producer whose commit had completed), so the data may be visible.
  A later attempt's marker read tells (``checkers/transactions.py``). After an *abortable* commit error
  the sink calls ``abort_transaction()`` as librdkafka requires: ``abort`` follows if it returned,
  ``abort-failed`` if it raised (the outcome stays unknown).
* ``abort`` – ``abort_transaction()`` returned: the transaction is aborted (the coordinator accepted
  EndTxn(ABORT) from the current producer epoch). Logged only after the call returned, never before.
* ``abandon`` – the attempt failed *before* ``commit_transaction()`` was called (``stage``: produce,
  flush, delivery, send_offsets, ...) and ``abort_transaction()`` did not return (not attempted after
  a fatal error, or it raised: ``abort_error``). The transaction was never asked to commit, so it cannot
  commit: only EndTxn(COMMIT), sent by ``commit_transaction()``, commits a transaction (KIP-98); the
  coordinator aborts it at ``transaction.timeout.ms`` or when the next producer of the same id calls
  ``init_transactions()``. Its records must never be visible at read_committed.

Error events carry ``error`` (text), ``error_class`` (the exception's class), ``error_code`` (librdkafka
error name, for ``KafkaException``) and ``kind`` (fatal / abortable / retriable / other / delivery).
"""

from __future__ import annotations

import functools
import json
import os
import socket
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, Producer

from onceproof import kafka_config
from onceproof.kafka_config import client_config
from onceproof.pipeline import hooks, marker, provenance
from onceproof.pipeline.mutants import Flaws


class SinkError(RuntimeError):
    """A sink task could not commit; Spark retries the task."""


@dataclass(frozen=True)
class SinkConfig:
    """What a sink task needs; picklable (sent to executors with the task closure).

    Attributes:
        bootstrap: Kafka bootstrap servers.
        output_topic: topic receiving rows.
        progress_topic: topic whose committed offsets hold the markers (1 partition).
        sink_id: prefix of every transactional.id and marker group; stable across restarts of a query.
        txn_timeout_ms: ``transaction.timeout.ms`` (ms); must exceed the longest commit delay.
        log_path: file receiving one JSON line per event (``sink.jsonl``; events in the module docstring),
            or "".
        control_dir: hook control directory, or "".
        flaws: a mutant's deliberate flaws (``pipeline/mutants.py``); all off for the real sink.
        incarnation: driver incarnation ("1", "2", ... from ``ONCEPROOF_DRIVER_INCARNATION``; "0" when
            unset); logged on every event and sent as the ``op.incarnation`` header.
        security: the cluster's security as ``kafka_config.to_parts`` flattens it (``()``: PLAINTEXT); a task
            configures its executor's clients with it before its first client.
    """

    bootstrap: str
    output_topic: str
    progress_topic: str
    sink_id: str
    txn_timeout_ms: int = 60000
    log_path: str = ""
    control_dir: str = ""
    incarnation: str = "0"
    flaws: Flaws = Flaws()  # MUTANTS ONLY (pipeline/mutants.py): never set outside test-all --mutants
    security: tuple[str, ...] = ()

    def __repr__(self) -> str:  # the password in ``security`` never reaches a log or a Spark plan string
        return (f"SinkConfig(bootstrap={self.bootstrap!r}, output_topic={self.output_topic!r}, "
                f"sink_id={self.sink_id!r}, security={'***' if self.security else '()'})")


def event_log(log_path: str, incarnation: str, sink: str) -> Callable[..., None]:
    """``log(event, **fields)``: :func:`append_event` of one sink's events in one driver incarnation (the
    table sinks' ``commit``/``skip``)."""
    return functools.partial(append_event, log_path, incarnation, sink=sink)


_HOST = socket.gethostname()


def append_event(log_path: str, incarnation: str, event: str, **fields) -> None:
    """Append one ``sink.jsonl`` event (``time``, ``event``, ``pid``, ``host`` (the machine's hostname: a pid
    names a process only on its machine), ``incarnation``, then ``fields``) to ``log_path``; nothing when it
    is "". Also used by ``pipeline/file_sink.py``'s hold."""
    if not log_path:
        return
    line = json.dumps({"time": time.time(), "event": event, "pid": os.getpid(), "host": _HOST,
                       "incarnation": incarnation, **fields}) + "\n"
    # One write(2) of a short line with O_APPEND: lines from concurrent tasks do not interleave.
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _log(cfg: SinkConfig, event: str, **fields) -> None:
    append_event(cfg.log_path, cfg.incarnation, event, **fields)


def log_event(cfg: SinkConfig, event: str, **fields) -> None:
    """Append one driver-side event to ``sink.jsonl`` (same line format as the tasks' events)."""
    _log(cfg, event, **fields)


def transactional_id(sink_id: str, partition: int) -> str:
    """Stable transactional.id of sink partition ``partition``."""
    return f"{sink_id}-{partition}"


def _attempt_txn_id(cfg: SinkConfig, partition: int, attempt: int) -> str:
    """The transactional.id a task attempt uses: the stable one, except under the ``eos-no-fencing``
    mutant (a fresh id per attempt, so no attempt fences another) and the ``eos-long-lived-producer`` one
    (one id per Python worker, ``<sink_id>-worker-<pid>``: the worker's one producer writes every partition)."""
    if cfg.flaws.fresh_txn_id:
        return f"{cfg.sink_id}-{partition}-i{cfg.incarnation}-a{attempt}-{os.getpid()}-{time.time_ns() % 10**6}"
    if cfg.flaws.long_lived_producer:
        return f"{cfg.sink_id}-worker-{os.getpid()}"
    return transactional_id(cfg.sink_id, partition)


SHORT_SOCKET_TIMEOUT_MS = 5000
"""``socket.timeout.ms`` of the ``eos-long-lived-fast-failover`` mutant (librdkafka's default is 60000)."""


def _producer(cfg: SinkConfig, txn_id: str) -> Producer:
    fast = {"socket.timeout.ms": SHORT_SOCKET_TIMEOUT_MS} if cfg.flaws.short_socket_timeout else {}
    return Producer(client_config(cfg.bootstrap, {
        **fast,
        "transactional.id": txn_id,
        "enable.idempotence": True,
        "acks": "all",
        "transaction.timeout.ms": cfg.txn_timeout_ms,
        "message.timeout.ms": max(1000, cfg.txn_timeout_ms - 5000),
        "linger.ms": 5,
        "partitioner": "murmur2_random",  # same key → partition mapping as Java clients / Spark's sink
        "log_level": 3,
    }))


def _retrying(what: str, fn, *args, attempts: int = 5):
    """Call ``fn``; retry librdkafka-retriable errors with backoff, re-raise the rest."""
    for i in range(attempts):
        try:
            return fn(*args)
        except KafkaException as e:
            err: KafkaError = e.args[0]
            if err.retriable() and i + 1 < attempts:
                time.sleep(0.2 * 2 ** i)
                continue
            raise


def abort_leftovers(cfg: SinkConfig, pool_size: int) -> None:
    """On query start, settle what a dead run left open for every id in the pool (Flink's
    abort-on-restore). Without it the output's last stable offset stays pinned and read_committed
    readers stall until ``transaction.timeout.ms``.

    Args: pool_size: number of sink partitions (= partitions of the input topic, read from Kafka's
    metadata at query start by ``onceproof.job``; ids ``<sink_id>-0`` .. ``<sink_id>-<pool_size-1>``).
    """
    if cfg.flaws.no_abort_on_start:  # the eos-no-abort-on-start mutant
        _log(cfg, "fence-on-start-skipped", pool_size=pool_size)
        return
    def fence(p: int) -> None:
        txn_id = transactional_id(cfg.sink_id, p)
        prod = _producer(cfg, txn_id)
        _retrying("init_transactions", prod.init_transactions, 60)
        _log(cfg, "fence-on-start", txn_id=txn_id, partition=p)
        del prod

    # the ids are independent (each its own producer and coordinator round trip), so they are fenced at
    # once: one by one cost ~0.1-0.6 s each at every driver start (1.5 s for 6, measured in sink.jsonl)
    with ThreadPoolExecutor(max_workers=max(1, min(pool_size, 16)), thread_name_prefix="fence") as ex:
        for f in [ex.submit(fence, p) for p in range(pool_size)]:
            f.result()


def _error_fields(e: BaseException) -> dict:
    """What an error event records: text, exception class, librdkafka error name and class."""
    f = {"error": str(e), "error_class": type(e).__name__}
    if isinstance(e, KafkaException) and e.args and isinstance(e.args[0], KafkaError):
        err: KafkaError = e.args[0]
        f["error_code"] = err.name()
        f["kind"] = ("fatal" if err.fatal() else "abortable" if err.txn_requires_abort()
                     else "retriable" if err.retriable() else "other")
    elif isinstance(e, SinkError):
        f["kind"] = "delivery"
    return f


def _abort_or_abandon(cfg: SinkConfig, prod: Producer, e: BaseException, stage: str, where: dict,
                      event_fields: dict | None = None) -> None:
    """Settle a transaction that failed before ``commit_transaction()`` was called, and log how.

    Calls ``abort_transaction()`` unless ``e`` is fatal (librdkafka refuses every transactional call
    after a fatal error; a fenced producer's transaction was already aborted by the fencer's
    ``init_transactions()``). Logs ``abort`` only after that call returned, else ``abandon`` (see the
    module docstring for why an abandoned transaction cannot commit).
    """
    fields = {**_error_fields(e), "stage": stage, **(event_fields or {})}
    fatal = isinstance(e, KafkaException) and e.args and isinstance(e.args[0], KafkaError) and e.args[0].fatal()
    if not fatal:
        try:
            prod.abort_transaction(30)
        except Exception as ae:  # noqa: BLE001 - any failure leaves the outcome to the coordinator
            fields.update(abort_error=str(ae), abort_error_class=type(ae).__name__)
        else:
            _log(cfg, "abort", **fields, **where)
            return
    _log(cfg, "abandon", **fields, **where)


def write_partition(cfg: SinkConfig, batch_id: int, rows: Iterable, expected: dict[int, int] | None = None) -> None:
    """Write one sink partition of micro-batch ``batch_id`` in one Kafka transaction.

    The steps, in this order (docs/architecture.md, "The exactly-once sink"): ``init_transactions()``
    (fences older attempts of the id and settles their open transaction) → read the marker (stable now)
    → skip when it is ≥ ``batch_id`` → ``begin_transaction()`` → produce → count check → ``flush()`` →
    pre-commit hooks → the marker into the transaction → ``commit_transaction()``.

    ``expected``: ``{sink partition: rows}`` the driver counted in the batch (``ExactlyOnceSink``); a task
    that produced another number aborts its transaction and fails (``incomplete-partition``, stage
    ``count-check``) instead of committing. Why: a Python task's input is streamed from its JVM task, and
    when the JVM side fails mid-stream (a shuffle ``FetchFailedException`` after another executor died,
    a Kafka fetch error), PySpark's serializer sees the closed stream as a normal end of input
    (``FramedSerializer.load_stream`` returns on ``EOFError``): the Python function runs to its end on a
    *truncated* partition, and only afterwards does the JVM fail the task. Without this check the
    transaction would commit the partial rows with the marker, and the retry would skip the rest.

    Runs on an executor inside ``foreachPartition``. ``rows`` yields ``Row(key: str, value: bytes,
    in_partition: int, in_offset: int)``; without ``in_partition``/``in_offset`` the ``op.input`` header
    is left out. Raises ``SinkError`` (Spark retries the task) when the
    transaction cannot be committed or its outcome is unknown; re-raises anything else (e.g. the input
    iterator failing) after settling the transaction. Every failure is logged first (module docstring).
    """
    # pyspark: only on an executor; this module is also imported by the driver's and harness's code
    from pyspark import TaskContext

    if cfg.security:  # this executor's clients take the cluster's security (PLAINTEXT needs nothing)
        kafka_config.configure(kafka_config.from_parts(cfg.security))
    ctx = TaskContext.get()
    part, attempt = ctx.partitionId(), ctx.attemptNumber()
    txn_id = _attempt_txn_id(cfg, part, attempt)
    where = {"batch": batch_id, "partition": part, "attempt": attempt, "txn_id": txn_id}
    rows = hooks.zombie_point(cfg.control_dir, "preinit", where, rows, lambda **f: _log(cfg, "zombie", **f))
    t0 = time.monotonic()
    prod = _task_producer(cfg, txn_id, where)
    cons = marker.open_consumer(cfg.bootstrap, cfg.sink_id, part)
    try:
        done = _read_marker(cfg, cons, where)
        if _already_written(cfg, done, batch_id):
            _log(cfg, "skip", marker=done, **where)
            return
        txn = _Transaction(cfg, prod, cons, batch_id, where, t0)
        try:
            txn.write(rows, done, expected)
            txn.commit()
        except SinkError:
            if cfg.flaws.commit_error_ignored and txn.stage == "send_offsets":
                return  # the eos-commit-error-ignored mutant: the task succeeds, Spark counts the batch
            raise
    except BaseException:
        _LONG_LIVED.pop(txn_id, None)  # the eos-long-lived-producer mutant discards a producer that failed
        raise
    finally:
        cons.close()


_LONG_LIVED: dict[str, Producer] = {}
"""The ``eos-long-lived-producer`` mutant's producers in this Python worker, by ``transactional.id``."""


def _task_producer(cfg: SinkConfig, txn_id: str, where: dict) -> Producer:
    """The producer of a task attempt, its transactions initialised: a new one per attempt (a fresh producer
    epoch per transaction, the defence against KAFKA-17754 in the module docstring), except under the
    ``eos-long-lived-producer`` mutant, which reuses this worker's producer of ``txn_id`` when it has one
    (``producer-reused``; ``producer-created`` when it made it). Raises ``SinkError`` (``init_transactions``)."""
    if cfg.flaws.long_lived_producer and txn_id in _LONG_LIVED:
        _log(cfg, "producer-reused", **where)
        return _LONG_LIVED[txn_id]
    prod = _producer(cfg, txn_id)
    _init_transactions(cfg, prod, where)
    if cfg.flaws.long_lived_producer:
        _LONG_LIVED[txn_id] = prod
        _log(cfg, "producer-created", **where)
    return prod


def _init_transactions(cfg: SinkConfig, prod: Producer, where: dict) -> None:
    """``init_transactions()`` on the task's producer: older producers of its id are fenced (producer
    epoch, KIP-98) and their open transaction settled. Raises ``SinkError``."""
    try:
        _retrying("init_transactions", prod.init_transactions, 60)
    except Exception as e:
        _log(cfg, "init-error", **_error_fields(e), **where)
        raise SinkError(f"init_transactions failed in sink task {where}: {e}") from e


def _read_marker(cfg: SinkConfig, cons, where: dict) -> int:
    """The partition's marker: the last batch committed (-1 for none). Raises ``SinkError``."""
    try:
        return _retrying("marker.read", marker.read, cons, cfg.progress_topic)
    except Exception as e:
        _log(cfg, "marker-error", **_error_fields(e), **where)
        raise SinkError(f"reading the marker failed in sink task {where}: {type(e).__name__}: {e}") from e


def _already_written(cfg: SinkConfig, done: int, batch_id: int) -> bool:
    """Whether the marker says this (batch, partition) is committed: ``done ≥ batch_id`` (≥, not =, so
    that a zombie of an older batch never writes). Mutants: ``==`` (``marker_equal``), never
    (``no_marker``)."""
    already = (done == batch_id) if cfg.flaws.marker_equal else (done >= batch_id)
    return already and not cfg.flaws.no_marker


class _Transaction:
    """One sink task's Kafka transaction, a method per step; :attr:`stage` names the step under way (an
    abort logs it)."""

    def __init__(self, cfg: SinkConfig, prod: Producer, cons, batch_id: int, where: dict, t0: float):
        self.cfg, self.prod, self.cons, self.batch_id, self.where, self.t0 = cfg, prod, cons, batch_id, where, t0
        self.stage = "begin"
        self.errors: list[KafkaError] = []
        self.records = 0
        self.delayed_ms = 0

    def write(self, rows: Iterable, done: int, expected: dict[int, int] | None) -> None:
        """Begin, produce ``rows``, check their count, flush, run the pre-commit hooks and add the marker.
        On any failure the transaction is settled (:func:`_abort_or_abandon`); a Kafka error is raised as
        ``SinkError``, anything else as it is."""
        try:
            if self.cfg.flaws.marker_first:
                self._marker_first()
            self._begin(done)
            self._produce(rows)
            self._check_count(expected)
            self._flush()
            self._precommit()
            self._send_marker()
        except BaseException as e:
            _abort_or_abandon(self.cfg, self.prod, e, self.stage, self.where)
            if isinstance(e, KafkaException):
                f = _error_fields(e)
                raise SinkError(f"{f.get('kind')} Kafka error at {self.stage} in sink task {self.where}: {e}") from e
            raise

    def _marker_first(self) -> None:
        """The ``eos-marker-first`` mutant: the marker committed in a transaction of its own, before the
        data, so "done" is visible before the data is."""
        self.stage = "marker-first"
        self.prod.begin_transaction()
        self.prod.send_offsets_to_transaction(marker.offsets_for(self.cfg.progress_topic, self.batch_id),
                                              self.cons.consumer_group_metadata(), 60)
        self.prod.commit_transaction(60)
        _log(self.cfg, "marker-first", marker=self.batch_id, **self.where)
        self.stage = "begin"

    def _begin(self, done: int) -> None:
        self.prod.begin_transaction()
        _log(self.cfg, "begin", marker=done, init_ms=round((time.monotonic() - self.t0) * 1000), **self.where)

    def _on_delivery(self, err, _msg) -> None:
        if err is not None:
            self.errors.append(err)

    def _produce(self, rows: Iterable) -> None:
        """Every row to the output topic with the provenance headers (``pipeline/provenance.py``)."""
        self.stage = "produce"
        w = self.where
        base_headers = [(provenance.BATCH, str(self.batch_id)), (provenance.SINK_PARTITION, str(w["partition"])),
                        (provenance.ATTEMPT, str(w["attempt"])), (provenance.TXN_ID, w["txn_id"]),
                        (provenance.SINK, "eos"), (provenance.INCARNATION, self.cfg.incarnation)]
        with_input = None  # rows carry in_partition/in_offset (optional: the library's users may drop them)
        for row in rows:
            if with_input is None:
                with_input = hasattr(row, "in_partition") and hasattr(row, "in_offset")
            headers = (base_headers + [(provenance.INPUT, f"{row.in_partition}:{row.in_offset}")]
                       if with_input else base_headers)
            while True:
                try:
                    self.prod.produce(self.cfg.output_topic, key=_bytes(row.key), value=_bytes(row.value),
                                      headers=headers, on_delivery=self._on_delivery)
                    break
                except BufferError:
                    self.prod.poll(0.1)
            self.records += 1
            if self.records % 1000 == 0:
                self.prod.poll(0)

    def _check_count(self, expected: dict[int, int] | None) -> None:
        """Raises ``SinkError`` when the rows produced are not the driver's count for this partition."""
        n, part = self.records, self.where["partition"]
        if expected is not None and n != expected.get(part, 0):
            self.stage = "count-check"
            _log(self.cfg, "incomplete-partition", records=n, expected=expected.get(part, 0), **self.where)
            raise SinkError(f"sink task {self.where} read {n} rows, the batch has {expected.get(part, 0)} in this "
                            "partition: its input stream ended early (an upstream failure); not committing")

    def _flush(self) -> None:
        """Wait for every record's delivery. Raises ``SinkError`` for delivery errors or records left."""
        self.stage = "flush"
        remaining = self.prod.flush(self.cfg.txn_timeout_ms / 1000)
        if self.errors or remaining:
            self.stage = "delivery"
            raise SinkError(f"{len(self.errors)} delivery error(s), {remaining} undelivered: "
                            f"{self.errors[:3]} at {self.where}")

    def _precommit(self) -> None:
        """The pre-commit fault hooks (``pipeline/hooks.py``): a zombie point and the commit-delay hold."""
        self.stage = "precommit-hook"
        hooks.zombie_point(self.cfg.control_dir, "precommit", self.where, None,
                           lambda **f: _log(self.cfg, "zombie", **f))
        self.delayed_ms = hooks.precommit_delay(self.cfg.control_dir, self.where,
                                                lambda **f: _log(self.cfg, "hold", **f))

    def _send_marker(self) -> None:
        """The marker (``batch_id + 1`` as group ``<sink_id>-marker-<p>``'s offset) into the transaction.
        A failure here is not an unknown outcome: ``send_offsets_to_transaction`` only adds the marker
        (AddOffsetsToTxn + TxnOffsetCommit) to the open transaction. Nothing commits a Kafka transaction
        but EndTxn(COMMIT), which only ``commit_transaction()`` sends (KIP-98)."""
        self.stage = "send_offsets"
        if not self.cfg.flaws.marker_first:
            _retrying("send_offsets_to_transaction", self.prod.send_offsets_to_transaction,
                      marker.offsets_for(self.cfg.progress_topic, self.batch_id),
                      self.cons.consumer_group_metadata(), 60)

    def commit(self) -> None:
        """``commit_transaction()``, then the ``commit`` event.

        It sends EndTxn(COMMIT). If it raises, the coordinator may already have written the commit (the
        request timed out after it arrived; the broker died after writing the PREPARE_COMMIT; the producer
        was fenced by an ``init_transactions()`` that completed our pending commit): the outcome is
        unknown, so it is logged as ``commit-unknown``, never as ``abort``. Raises ``SinkError`` for a
        Kafka error, anything else as it is."""
        cfg, where = self.cfg, self.where
        try:
            _retrying("commit_transaction", self.prod.commit_transaction, 60)
        except BaseException as e:
            f = _error_fields(e)
            _log(cfg, "commit-unknown", **f, **where)
            if isinstance(e, KafkaException) and f.get("kind") == "abortable":
                self._abort_after_commit_error(f)
            if isinstance(e, KafkaException):
                raise SinkError(f"{f.get('kind')} Kafka error in commit_transaction, outcome unknown, "
                                f"in sink task {where}: {e}") from e
            raise
        _log(cfg, "commit", records=self.records, ms=round((time.monotonic() - self.t0) * 1000),
             precommit_delay_ms=self.delayed_ms, **where)

    def _abort_after_commit_error(self, f: dict) -> None:
        """librdkafka: an abortable error from ``commit_transaction()`` must be followed by
        ``abort_transaction()``. If that returns, the coordinator accepted EndTxn(ABORT) for this epoch,
        which it refuses for a completed commit: the outcome is then known, ``abort``."""
        try:
            self.prod.abort_transaction(30)
        except Exception as ae:  # noqa: BLE001 - the outcome stays unknown
            _log(self.cfg, "abort-failed", error=str(ae), error_class=type(ae).__name__, stage="commit", **self.where)
        else:
            _log(self.cfg, "abort", **f, stage="commit", **self.where)


def _bytes(v):
    """``v`` as ``produce()`` takes it: PySpark 3.5 hands a binary column's value over as a ``bytearray``,
    which confluent-kafka refuses ("read-only bytes-like object"); 4.x hands over ``bytes``."""
    return bytes(v) if isinstance(v, bytearray) else v
