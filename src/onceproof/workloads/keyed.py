"""The keyed-sequence workload: each key gets the sequence 0, 1, 2, ... written to the input topic, and
the pipeline must deliver every record exactly once, in order per key (the :data:`WORKLOAD` object:
generator and client, the pipeline's transform, the output decoder and ``onceproof.checkers.exactly_once``).

Generator: a seeded stream of ``(key, seq)``; keys are ``k0``..``k<n-1>`` chosen uniformly, ``seq``
counts per key from 0 with no gaps in what is *attempted*.

Client: an idempotent producer (``--producer idempotent``; the default client, :class:`AtMostOnceWorkload`,
sends each record once without retries), recreated when librdkafka reports a fatal error (an idempotent
producer's fatal error, e.g. an unrecoverable sequence gap, leaves it unable to send; librdkafka's
INTRODUCTION.md, "Idempotent Producer"), so the workload never goes silent. The producer
(``enable.idempotence=true``, ``acks=all``) writing Kafka key = the workload key, value = ``{"key", "seq",
"t"}`` (``t`` = send time, epoch ms). Each send is two ops in the history: ``invoke`` before
``produce()``, then from the delivery report ``ok`` (with partition/offset),
``fail`` (a definite error: the record is certainly not in the log) or ``info`` (indeterminate: a timeout
or a fatal producer error, so the record may or may not be in the log). At close, anything never
reported becomes ``info``.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import ClassVar

from confluent_kafka import KafkaError, KafkaException, Producer

from onceproof.kafka_config import client_config
from onceproof.store.history import HistoryWriter
from onceproof.workloads import producers

METADATA_REFRESH_MS = 5000
"""The workload producers' ``topic.metadata.refresh.interval.ms`` (librdkafka's default is 300,000): a
partition added to the input mid-run (``nemesis/grow.py``) is written to within about 5 s."""

# Delivery errors after which the record is certainly absent from the log. Everything else is
# indeterminate: e.g. _MSG_TIMED_OUT may come after the broker appended the record.
_DEFINITE = {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_RECORD, KafkaError.TOPIC_AUTHORIZATION_FAILED,
             KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._INVALID_ARG}


def sequences(keys: int, seed: int) -> Iterator[tuple[str, int]]:
    """Endless seeded stream of ``(key, seq)``; per key, ``seq`` is 0, 1, 2, ..."""
    rng = random.Random(seed)
    nxt = [0] * keys
    while True:
        k = rng.randrange(keys)
        yield f"k{k}", nxt[k]
        nxt[k] += 1


@dataclass
class SendStats:
    """Counts of completed sends by type (records), and ``ends``: per input partition, one past the
    highest offset acknowledged (``{partition: offset + 1}``; a session's live view reads the input's
    end from it instead of asking the brokers)."""

    invoke: int = 0
    ok: int = 0
    fail: int = 0
    info: int = 0
    ends: dict[int, int] = field(default_factory=dict)

    def acked(self, partition: int, offset: int | None) -> None:
        """One record acknowledged at ``partition``/``offset``. ``offset`` is ``None`` for a delivery
        librdkafka reports without one: confluent-kafka's ``Message.offset()`` gives ``None`` for
        ``RD_KAFKA_OFFSET_INVALID``, which an idempotent producer's retry answered with
        ``DUPLICATE_SEQUENCE_NUMBER`` carries (the record was appended by the first attempt and counts
        as delivered: librdkafka PR #4438); such a record counts as ok and leaves ``ends`` as it is."""
        self.ok += 1
        if offset is not None and offset >= self.ends.get(partition, 0):
            self.ends[partition] = offset + 1


@dataclass
class KeyedWorkload:
    """Drives ``rate`` records/s of ``sequences(keys, seed)`` into ``topic`` until :meth:`stop`.

    Raises nothing from the sending thread: producer errors become ``fail``/``info`` ops.
    """

    bootstrap: str
    topic: str
    history: HistoryWriter
    rate: float = 300.0
    keys: int = 50
    seed: int = 0
    delivery_timeout_ms: int = 30000
    stats: SendStats = field(default_factory=SendStats)
    errors: list[str] = field(default_factory=list)  # client-level errors (error_cb), newest last
    producers: int = 0  # producer instances created (1 + recreations after fatal errors)
    stopped_by: str | None = None  # "HH:MM:SS <exception>" when the send loop died of a bug
    _stop: threading.Event = field(default_factory=threading.Event)
    _abandon: threading.Event = field(default_factory=threading.Event)
    _fatal: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _reported: int = 0
    _pending: dict = field(default_factory=dict)  # (key, seq) sent, no delivery report yet

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="workload", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop sending, wait for outstanding deliveries, record the rest as ``info``.

        ``timeout_s`` bounds the wait (seconds); ``None`` waits up to ``delivery_timeout_ms`` + 30 s, so
        every send gets its report. A teardown after Ctrl-C passes a few seconds.
        """
        self._stop.set()
        if timeout_s is not None:
            self._abandon.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s if timeout_s is not None else self.delivery_timeout_ms / 1000 + 30)

    def new_errors(self) -> list[str]:
        """Fatal client errors since the last call, for the console; every error (transient ones such
        as a refused connection to a killed broker included) stays in ``errors`` for results.json."""
        new, self._reported = self.errors[self._reported:], len(self.errors)
        return [f"workload: {e}" for e in new if e.endswith("(fatal)")]

    def _on_error(self, err) -> None:
        self._note(err)
        if err.fatal():
            self._fatal.set()

    def _note(self, err: KafkaError, what: str = "") -> None:
        """Keep a client error in ``errors`` (``what``: the call that raised it); a fatal one is marked
        ``(fatal)``, which :meth:`new_errors` shows on the console."""
        self.errors.append(f"{time.strftime('%H:%M:%S')} {what + ': ' if what else ''}{err.str()}"
                           + (" (fatal)" if err.fatal() else ""))

    def _complete(self, key: str, seq: int, err, msg) -> None:
        if err is None:
            self.stats.acked(msg.partition(), msg.offset())
            self.history.append({"process": 0, "type": "ok", "f": "send", "key": key, "seq": seq,
                                 "partition": msg.partition(), "offset": msg.offset()})
        else:
            definite = err.code() in _DEFINITE and not err.fatal()
            t = "fail" if definite else "info"
            setattr(self.stats, t, getattr(self.stats, t) + 1)
            self.history.append({"process": 0, "type": t, "f": "send", "key": key, "seq": seq,
                                 "error": err.str()})

    contiguous_input: ClassVar[bool] = True
    """Every input offset holds a record (no transaction markers): the pipeline's completeness guard
    (``pipeline/completeness.py``) can count each batch's rows against its offset range."""
    aborts: ClassVar[bool] = False
    """Whether the client aborts transactions on purpose (``--input-aborts``)."""
    PRODUCER_CONFIG: ClassVar[dict] = {"enable.idempotence": True, "acks": "all"}
    """librdkafka settings of this client's producer beyond the common ones."""

    def _producer(self) -> Producer:
        self.producers += 1
        self._fatal.clear()
        return Producer(client_config(self.bootstrap, {**self.PRODUCER_CONFIG, "linger.ms": 5,
                                                       "delivery.timeout.ms": self.delivery_timeout_ms,
                                                       "topic.metadata.refresh.interval.ms": METADATA_REFRESH_MS,
                                                       "partitioner": "murmur2_random"},
                                       error_cb=self._on_error,
                                       logger=logging.getLogger("onceproof.librdkafka.workload")))

    # hooks of the send loop; the idempotent producer needs none of them (a transactional client's do
    # its commits: workloads/transactional_client.py)
    def _sent(self, key: str, seq: int) -> None:
        """A record of ``(key, seq)`` went into ``produce()``."""

    def _after_send(self, prod: Producer) -> Producer:
        """After each send's poll; returns the producer to go on with."""
        return prod

    def _produce(self, prod: Producer, key: str, seq: int, value: str, cb) -> bool:
        """``produce()`` one record, waiting while the local queue is full; True when it was queued. A
        record ``produce()`` refuses (a fatal producer raises at once) is never in the log: a ``fail``
        op, and a fatal error retires the producer."""
        while True:
            try:
                prod.produce(self.topic, key=key, value=value, on_delivery=cb)
                return True
            except BufferError:
                prod.poll(0.05)
            except KafkaException as e:
                err: KafkaError = e.args[0]
                self._pending.pop((key, seq), None)
                self.stats.fail += 1
                self.history.append({"process": 0, "type": "fail", "f": "send", "key": key, "seq": seq,
                                     "error": f"produce() refused it: {err.str()}"})
                if err.fatal() and not self._fatal.is_set():
                    self._on_error(err)
                return False

    def _retire(self, prod: Producer) -> None:
        """A producer with a fatal error is dropped: let it report what it still holds (≤ 5 s)."""
        flush(prod, 5)

    def _close(self, prod: Producer, timeout_s: float) -> None:
        """The send loop ended: deliver what is outstanding within ``timeout_s`` seconds."""
        flush(prod, timeout_s)

    def _run(self) -> None:
        try:
            self._send_loop()
        except Exception as e:  # a bug, not a client error: on the console, then the thread's traceback
            at = time.strftime('%H:%M:%S')
            self.stopped_by = f"{at} {e!r}"  # results.json's workload_stopped
            self.errors.append(f"{at} the workload stopped sending: {e!r} (fatal)")
            raise

    def _send_loop(self) -> None:
        prod = self._producer()
        pending = self._pending
        gen = sequences(self.keys, self.seed)
        interval = 1.0 / self.rate if self.rate > 0 else 0.0
        next_t = time.monotonic()
        while not self._stop.is_set():
            key, seq = next(gen)
            self.history.append({"process": 0, "type": "invoke", "f": "send", "key": key, "seq": seq})
            self.stats.invoke += 1
            pending[(key, seq)] = True

            def cb(err, msg, key=key, seq=seq):
                pending.pop((key, seq), None)
                self._complete(key, seq, err, msg)

            value = json.dumps({"key": key, "seq": seq, "t": int(time.time() * 1000)})
            next_t += interval
            try:
                if self._produce(prod, key, seq, value, cb):
                    self._sent(key, seq)
                prod.poll(max(0.0, next_t - time.monotonic()))
                if time.monotonic() - next_t > 1.0:  # fell behind (e.g. broker down): do not burst later
                    next_t = time.monotonic()
                prod = self._after_send(prod)
            except (KafkaException, SystemError) as e:  # poll() and the transaction calls raise fatal errors
                err = client_error(e)
                if err is None:
                    raise
                if not self._fatal.is_set():
                    self._on_error(err)
                self._fatal.set()
            if self._fatal.is_set():
                # The old instance fails what it still holds (delivery reports → fail/info ops); then a
                # new one carries on with the next sequence numbers.
                self._retire(prod)
                prod = self._producer()
        self._close(prod, 2 if self._abandon.is_set() else self.delivery_timeout_ms / 1000 + 5)
        for key, seq in list(pending):
            self.stats.info += 1
            self.history.append({"process": 0, "type": "info", "f": "send", "key": key, "seq": seq,
                                 "error": "no delivery report before close"})


def flush(prod: Producer, timeout_s: float) -> None:
    """``prod.flush(timeout_s)``, serving the delivery reports it can; a producer with a fatal error
    raises ``KafkaException`` from it, which is dropped here (its sends are completed by their reports
    or, when the send loop ends, as ``info``)."""
    try:
        prod.flush(timeout_s)
    except (KafkaException, SystemError) as e:
        if client_error(e) is None:
            raise


def client_error(e: BaseException) -> KafkaError | None:
    """The ``KafkaError`` behind ``e``: a ``KafkaException``'s, or the one behind the ``SystemError``
    confluent-kafka raises when a fatal error arrives while ``flush()``/``poll()`` runs a delivery
    callback (the ``SystemError``'s ``__cause__`` is the ``KafkaException``); None for anything else."""
    while e is not None:
        if isinstance(e, KafkaException) and e.args and isinstance(e.args[0], KafkaError):
            return e.args[0]
        e = e.__cause__ if isinstance(e, SystemError) else None
    return None


@dataclass
class AtMostOnceWorkload(KeyedWorkload):
    """The keyed workload's default client: each send tried once (``message.send.max.retries=0``, no
    idempotence, ``acks=all``), so no client-side resend exists that could become visible twice
    (librdkafka's idempotent producer can resend a possibly-persisted batch under a bumped epoch:
    confluentinc/librdkafka#4953). A send that fails or times out is ``fail``/``info``; the input stays
    contiguous (no transaction markers), so the pipeline's completeness guard keeps working."""

    PRODUCER_CONFIG: ClassVar[dict] = {"enable.idempotence": False, "acks": "all", "message.send.max.retries": 0}


def transform(src):
    """Input rows (Kafka source schema) → ``key: string, value: binary (JSON), in_partition, in_offset``.

    The output value is ``{"key", "seq", "in_partition", "in_offset", "in_ts"}`` with ``in_ts`` the input
    record's append time in ms.
    """
    # pyspark: only where Spark runs; this module is imported on the harness side too, which needs no Spark
    from pyspark.sql import functions as F

    schema = "key STRING, seq LONG"
    parsed = src.select(
        F.col("key").cast("string").alias("kkey"),
        F.from_json(F.col("value").cast("string"), schema).alias("v"),
        F.col("partition").alias("in_partition"),
        F.col("offset").alias("in_offset"),
        (F.col("timestamp").cast("double") * 1000).cast("long").alias("in_ts"),
    )
    value = F.to_json(F.struct(F.col("v.key").alias("key"), F.col("v.seq").alias("seq"),
                               "in_partition", "in_offset", "in_ts"))
    return parsed.select(F.col("kkey").alias("key"), value.cast("binary").alias("value"),
                         "in_partition", "in_offset")


class Keyed:
    """The keyed workload (``workloads/base.py``): every input record once in the output, in order per key
    (``checkers/exactly_once.py``, whose docstring names the anomalies)."""

    name = "keyed"
    summary = "every (key, seq) record passes through once, in order per key"
    output_mode = "append"
    spark_conf: dict[str, str] = {}
    input_refs = True

    def client(self, bootstrap: str, topic: str, history, *, rate: float, keys: int, seed: int,
               producer: str = producers.DEFAULT, input_aborts: float | None = None) -> KeyedWorkload:
        return producers.client(producer, bootstrap, topic, history, rate=rate, keys=keys, seed=seed,
                                input_aborts=input_aborts)

    def transform(self, src):
        return transform(src)

    def decode(self, frame):
        # lazy: pandas; the job's driver imports this workload and has none
        from onceproof.clients.topics import decode_values

        return decode_values(frame)

    def check(self, history, input, output, recovery=None) -> dict:
        # lazy: pandas; the job's driver imports this workload and has none
        from onceproof.checkers.exactly_once import check

        return check(history, input, output, recovery)


WORKLOAD = Keyed()
