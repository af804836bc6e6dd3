"""The exactly-once Kafka sink: one Kafka transaction per (micro-batch, sink partition), made idempotent
under replay by a progress marker committed in the same transaction (DESIGN §2).

Why ``foreachBatch`` + ``foreachPartition`` rather than a Python data source writer
(``pyspark.sql.datasource.DataSourceStreamWriter``):

* ``foreachBatch`` hands us ``batchId`` through a public API. A data source writer only sees it through
  the internal task-local property ``streaming.sql.batchId``.
* It gives one driver-side point that runs after every sink task has committed and before Spark writes
  ``commits/<batchId>``: the commit-notification window the ``kill-driver-in-commit-window`` nemesis
  needs, on the same code path for both sinks (the at-least-once sink uses Spark's batch Kafka writer
  inside ``foreachBatch``).
* Both run the same per-partition tasks on executors, with the same retry semantics.

Per task, in this order (each step's reason in DESIGN §2):

1. ``transactional.id = <sink_id>-<partitionId>``; ``init_transactions()`` fences every older producer
   with that id (producer epoch bump, KIP-98) and aborts or completes its open transaction.
2. Read the marker (now stable). If it is ≥ ``batchId`` this partition of this batch is already in
   Kafka: skip. ≥, not ==, so that a zombie from an older batch never writes.
3. ``begin_transaction()`` → produce every row with provenance headers → ``flush()``.
4. Commit-delay hook (pre-commit window, ``pipeline/hooks.py``), then ``send_offsets_to_transaction(marker = batchId+1)`` and
   ``commit_transaction()``.

Errors, per librdkafka's classes (https://github.com/confluentinc/librdkafka/blob/master/INTRODUCTION.md
#transactional-producer): retriable → retry the call; ``txn_requires_abort()`` → abort, then fail the
task so Spark retries it; fatal (e.g. fenced) → fail the task. ``message.timeout.ms`` is kept below
``transaction.timeout.ms`` as librdkafka requires.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Iterable

from confluent_kafka import KafkaError, KafkaException, Producer

from pipeline import hooks, marker, provenance


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
        log_path: file receiving one JSON line per begin/skip/commit/abort (``sink.jsonl``), or "".
        control_dir: hook control directory, or "".
        skip_marker_check: the ``eos-no-marker`` mutant; ignores the marker (replays are rewritten).
    """

    bootstrap: str
    output_topic: str
    progress_topic: str
    sink_id: str
    txn_timeout_ms: int = 60000
    log_path: str = ""
    control_dir: str = ""
    skip_marker_check: bool = False  # the eos-no-marker mutant: never skip an already committed batch


def _log(cfg: SinkConfig, event: str, **fields) -> None:
    if not cfg.log_path:
        return
    line = json.dumps({"time": time.time(), "event": event, "pid": os.getpid(), **fields}) + "\n"
    # One write(2) of a short line with O_APPEND: lines from concurrent tasks do not interleave.
    fd = os.open(cfg.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def transactional_id(sink_id: str, partition: int) -> str:
    """Stable transactional.id of sink partition ``partition``."""
    return f"{sink_id}-{partition}"


def _producer(cfg: SinkConfig, txn_id: str) -> Producer:
    return Producer({
        "bootstrap.servers": cfg.bootstrap,
        "transactional.id": txn_id,
        "enable.idempotence": True,
        "acks": "all",
        "transaction.timeout.ms": cfg.txn_timeout_ms,
        "message.timeout.ms": max(1000, cfg.txn_timeout_ms - 5000),
        "linger.ms": 5,
        "partitioner": "murmur2_random",  # same key → partition mapping as Java clients / Spark's sink
        "log_level": 3,
    })


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

    Args: pool_size: number of sink partitions (= input partitions).
    """
    for p in range(pool_size):
        txn_id = transactional_id(cfg.sink_id, p)
        prod = _producer(cfg, txn_id)
        _retrying("init_transactions", prod.init_transactions, 60)
        _log(cfg, "fence-on-start", txn_id=txn_id, partition=p)
        del prod


def write_partition(cfg: SinkConfig, batch_id: int, rows: Iterable) -> None:
    """Write one sink partition of micro-batch ``batch_id`` in one Kafka transaction.

    Runs on an executor inside ``foreachPartition``. ``rows`` yields ``Row(key: str, value: bytes,
    in_partition: int, in_offset: int)``. Raises ``SinkError`` (Spark retries the task) when the
    transaction cannot be committed.
    """
    from pyspark import TaskContext

    ctx = TaskContext.get()
    part, attempt = ctx.partitionId(), ctx.attemptNumber()
    txn_id = transactional_id(cfg.sink_id, part)
    where = {"batch": batch_id, "partition": part, "attempt": attempt, "txn_id": txn_id}
    prod = _producer(cfg, txn_id)
    t0 = time.monotonic()
    _retrying("init_transactions", prod.init_transactions, 60)
    cons = marker.open_consumer(cfg.bootstrap, cfg.sink_id, part)
    try:
        done = marker.read(cons, cfg.progress_topic)
        if done >= batch_id and not cfg.skip_marker_check:
            _log(cfg, "skip", marker=done, **where)
            return
        prod.begin_transaction()
        _log(cfg, "begin", marker=done, init_ms=round((time.monotonic() - t0) * 1000), **where)
        errors: list[KafkaError] = []

        def on_delivery(err, _msg):
            if err is not None:
                errors.append(err)

        base_headers = [(provenance.BATCH, str(batch_id)), (provenance.SINK_PARTITION, str(part)),
                        (provenance.ATTEMPT, str(attempt)), (provenance.TXN_ID, txn_id),
                        (provenance.SINK, "eos")]
        n = 0
        for row in rows:
            headers = base_headers + [(provenance.INPUT, f"{row.in_partition}:{row.in_offset}")]
            while True:
                try:
                    prod.produce(cfg.output_topic, key=row.key, value=row.value, headers=headers,
                                 on_delivery=on_delivery)
                    break
                except BufferError:
                    prod.poll(0.1)
            n += 1
            if n % 1000 == 0:
                prod.poll(0)
        remaining = prod.flush(cfg.txn_timeout_ms / 1000)
        if errors or remaining:
            raise SinkError(f"{len(errors)} delivery error(s), {remaining} undelivered: "
                            f"{errors[:3]} at {where}")
        delayed_ms = hooks.precommit_delay(cfg.control_dir, where, lambda **f: _log(cfg, "hold", **f))
        _retrying("send_offsets_to_transaction", prod.send_offsets_to_transaction,
                  marker.offsets_for(cfg.progress_topic, batch_id), cons.consumer_group_metadata(), 60)
        _retrying("commit_transaction", prod.commit_transaction, 60)
        _log(cfg, "commit", records=n, ms=round((time.monotonic() - t0) * 1000), precommit_delay_ms=delayed_ms,
             **where)
    except KafkaException as e:
        err: KafkaError = e.args[0]
        kind = "fatal" if err.fatal() else "abortable" if err.txn_requires_abort() else "other"
        _log(cfg, "abort", error=str(err), kind=kind, **where)
        if kind == "abortable":
            try:
                prod.abort_transaction(30)
            except KafkaException:
                pass  # the next attempt's init_transactions() settles it
        raise SinkError(f"{kind} Kafka error in sink task {where}: {err}") from e
    except SinkError as e:
        _log(cfg, "abort", error=str(e), kind="delivery", **where)
        try:
            prod.abort_transaction(30)
        except KafkaException:
            pass
        raise
    finally:
        cons.close()
