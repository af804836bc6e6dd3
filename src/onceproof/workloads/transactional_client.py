"""The workload's default client: the keyed workload's sends (``workloads/keyed.py``) grouped into Kafka
transactions of about :data:`TXN_MS` ms each, so that a client-side resend can never become visible.

Why: librdkafka's idempotent producer can resend a possibly-persisted batch under a bumped epoch after a
timed-out request during a leader change, which the broker cannot deduplicate
(https://github.com/confluentinc/librdkafka/issues/4953): the input log then holds one send twice
(``input-duplicate``), a finding about the client, not about the pipeline under test. In a transaction a
resend under a new epoch belongs to a transaction that is aborted (the epoch bump aborts it, KIP-360),
and the pipeline and the checker read the input at ``read_committed``, where aborted records do not exist.
``--producer idempotent`` keeps the idempotent producer, to test the client itself.

Aborts on purpose (``--input-aborts``, :attr:`TransactionalWorkload.input_aborts`): a seeded fraction of
the transactions is flushed (their records are in the log, visible to a read_uncommitted reader) and
then aborted, as Kafka's ``TransactionalMessageCopier --enable-random-aborts`` does in its system tests
(``tests/kafkatest/tests/core/transactions_test.py``): a pipeline whose Kafka source reads at
read_uncommitted (Spark's default unless ``kafka.isolation.level=read_committed``) copies them, which
the checker reports as ``aborted-input-read``. And one transaction (the :data:`HELD_TXN`-th) is kept
open :data:`HOLD_MS` ms, several micro-batches, before it commits, so such a reader also sees
uncommitted records early.

Ops: a send's completion is recorded when its transaction ends, not at its delivery report, with the
transaction as ``txn`` (``<transactional.id>#<n>``, n counting from 1):

* ``ok`` (with partition/offset from the delivery report) when ``commit_transaction()`` returned;
* ``fail`` when ``abort_transaction()`` returned (an aborted transaction's records are never visible at
  read_committed: KIP-98): aborted on purpose (``error`` = :data:`ABORTED_ON_PURPOSE`), or after a
  delivery error or an abortable commit error;
* ``info`` when the outcome is unknown (a commit that timed out or a fatal error: the EndTxn may have
  reached the coordinator), and for sends never delivered before close.

Errors follow librdkafka's transactional-producer classes (INTRODUCTION.md, "Transactional Producer"):
retriable → retry the call within :data:`COMMIT_TIMEOUT_S`; ``txn_requires_abort()`` → abort; fatal → a
new producer with the same ``transactional.id`` (its ``init_transactions()`` fences the old one).
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import ClassVar

from confluent_kafka import KafkaError, KafkaException, Producer

from onceproof.kafka_config import client_config
from onceproof.workloads.keyed import METADATA_REFRESH_MS, KeyedWorkload, client_error, flush

TXN_MS = 200
"""Milliseconds of sends per transaction (60 records at the default 300 records/s)."""
COMMIT_TIMEOUT_S = 30.0
"""Seconds ``init_transactions()``, ``commit_transaction()`` and ``abort_transaction()`` may take in all,
retries included; it stays below the transaction timeout so the coordinator never aborts one in use."""
TXN_TIMEOUT_MS = 60000
INPUT_ABORTS = 0.1
"""The default fraction of the workload's transactions aborted on purpose (``--input-aborts``)."""
ABORTED_ON_PURPOSE = "aborted on purpose (--input-aborts)"
"""The ``error`` of a send whose transaction the workload aborted on purpose."""
HELD_TXN = 3
"""Which transaction (counting from 1) is held open :data:`HOLD_MS` before it commits."""
HOLD_MS = 3000
"""Milliseconds the held transaction stays open: three micro-batches at the default 1-s trigger, well
below :data:`TXN_TIMEOUT_MS`."""


@dataclass
class TransactionalWorkload(KeyedWorkload):
    """:class:`~onceproof.workloads.keyed.KeyedWorkload` with every send inside a transaction (module
    docstring). ``txn_ms``: ms of sends per transaction; ``input_aborts``: the fraction of transactions
    aborted on purpose (0 to 1, drawn per transaction from a generator seeded by ``seed``);
    ``hold_ms``: how long the :data:`HELD_TXN`-th transaction stays open (0: none held)."""

    contiguous_input: ClassVar[bool] = False  # commit and abort markers take offsets of the input
    aborts: ClassVar[bool] = True

    txn_ms: int = TXN_MS
    input_aborts: float = INPUT_ABORTS
    hold_ms: int = HOLD_MS
    txns: int = 0  # transactions begun
    aborted_on_purpose: int = 0  # transactions aborted on purpose
    _rng: random.Random | None = None
    transactional_id: str = field(default_factory=lambda: f"onceproof-workload-{uuid.uuid4().hex[:12]}")
    _txn: list = field(default_factory=list)  # [key, seq, partition, offset, error] of the open transaction
    _txn_start: float = 0.0
    _open: bool = False

    def _producer(self) -> Producer:
        """A new producer, its transactions initialised (retried until it works or the run stops) and the
        first one begun."""
        self.producers += 1
        self._fatal.clear()
        prod = Producer(client_config(self.bootstrap, {"transactional.id": self.transactional_id, "acks": "all",
                                                       "linger.ms": 5, "delivery.timeout.ms": self.delivery_timeout_ms,
                                                       "transaction.timeout.ms": TXN_TIMEOUT_MS,
                                                       "partitioner": "murmur2_random",
                                                       "topic.metadata.refresh.interval.ms": METADATA_REFRESH_MS},
                                       error_cb=self._on_error,
                                       logger=logging.getLogger("onceproof.librdkafka.workload")))
        while not self._stop.is_set():
            try:
                self._call(prod.init_transactions)
                self._begin(prod)
            except KafkaException as e:  # no coordinator within the timeout (brokers down): try again
                self.errors.append(f"{time.strftime('%H:%M:%S')} init_transactions: {e.args[0].str()}")
                if e.args[0].fatal():
                    return self._producer()
                continue
            break
        return prod

    def _call(self, fn) -> None:
        """``fn(timeout)``, retried while librdkafka says retriable, within :data:`COMMIT_TIMEOUT_S`."""
        deadline = time.monotonic() + COMMIT_TIMEOUT_S
        while True:
            try:
                fn(max(1.0, deadline - time.monotonic()))
                return
            except KafkaException as e:
                err: KafkaError = e.args[0]
                if not err.retriable() or time.monotonic() >= deadline or self._abandon.is_set():
                    raise
                time.sleep(0.2)

    def _sent(self, key: str, seq: int) -> None:
        self._txn.append([key, seq, None, None, None])  # outside a transaction only when stopping: info

    def _complete(self, key: str, seq: int, err, msg) -> None:
        # the delivery report: remembered until the transaction ends (the last entry of (key, seq) in it)
        for rec in reversed(self._txn):
            if rec[0] == key and rec[1] == seq:
                if err is None:
                    rec[2], rec[3] = msg.partition(), msg.offset()
                else:
                    rec[4] = err.str()
                return

    def _begin(self, prod: Producer) -> None:
        prod.begin_transaction()
        self.txns += 1
        self._open, self._txn_start, self._txn = True, time.monotonic(), []

    @property
    def txn_name(self) -> str:
        """The open (or last) transaction as ops name it: ``<transactional.id>#<n>``."""
        return f"{self.transactional_id}#{self.txns}"

    def _after_send(self, prod: Producer) -> Producer:
        span = self.hold_ms if self.hold_ms and self.txns == HELD_TXN else self.txn_ms
        if (time.monotonic() - self._txn_start) * 1000 < span or self._fatal.is_set():
            return prod  # a fatal error: the send loop retires the producer
        return self._end(prod)

    def _abort_on_purpose(self) -> bool:
        """Whether the transaction ending now is aborted on purpose (one seeded draw per transaction; the
        held one always commits)."""
        if self._rng is None:
            self._rng = random.Random(f"{self.seed}-input-aborts")
        draw = self._rng.random()
        return draw < self.input_aborts and not (self.hold_ms and self.txns == HELD_TXN)

    def _end(self, prod: Producer, flush_s: float = COMMIT_TIMEOUT_S, reopen: bool = True) -> Producer:
        """Commit the open transaction and record its sends' ops; open the next one when ``reopen``. A
        fatal error gets a new producer, which is returned."""
        outcome, why = "ok", ""
        try:
            prod.flush(flush_s)  # serves the delivery reports before the commit decides
            if any(r[4] for r in self._txn):
                raise _Abort(next(r[4] for r in self._txn if r[4]))
            if reopen and self._txn and self._abort_on_purpose():  # its records are in the log: abort them
                outcome, why = self._abort(prod, "")
                if outcome == "fail":
                    self.aborted_on_purpose += 1
                    why = ABORTED_ON_PURPOSE
            else:
                self._call(prod.commit_transaction)
        except _Abort as a:
            outcome, why = self._abort(prod, f"delivery error: {a}")
        except (KafkaException, SystemError) as e:
            err = client_error(e)
            if err is None:
                raise
            if err.txn_requires_abort():
                outcome, why = self._abort(prod, f"commit: {err.str()}")
            else:
                outcome, why = "info", f"commit outcome unknown: {err.str()}"
                self._fatal.set()  # a producer whose transaction state is unknown is replaced
                self._note(err, "commit_transaction")
        self._record(outcome, why)
        self._open = False
        if not reopen:
            return prod
        if not self._fatal.is_set():
            try:
                self._begin(prod)
                return prod
            except KafkaException as e:  # fenced or fatal since the commit
                self.errors.append(f"{time.strftime('%H:%M:%S')} begin_transaction: {e.args[0].str()}")
        return self._producer()

    def _abort(self, prod: Producer, why: str) -> tuple[str, str]:
        try:
            self._call(prod.abort_transaction)
        except KafkaException as e:
            self._fatal.set()
            self._note(e.args[0], "abort_transaction")
            return "info", f"{why}; abort failed: {e.args[0].str()}"
        return "fail", f"{why}; transaction aborted"

    def _record(self, outcome: str, why: str) -> None:
        for key, seq, part, off, _err in self._txn:
            if outcome == "ok" and part is None:  # committed without a delivery report: cannot happen
                outcome_r, why_r = "info", "committed without a delivery report"
            else:
                outcome_r, why_r = outcome, why
            if outcome_r == "ok":
                self.stats.acked(part, off)
            else:
                setattr(self.stats, outcome_r, getattr(self.stats, outcome_r) + 1)
            op = {"process": 0, "type": outcome_r, "f": "send", "key": key, "seq": seq, "txn": self.txn_name}
            op.update({"partition": part, "offset": off} if outcome_r == "ok" else {"error": why_r})
            self.history.append(op)
            self._pending.pop((key, seq), None)  # completed here, not again as "no delivery report"
        self._txn = []

    def _retire(self, prod: Producer) -> None:
        flush(prod, 5)
        if self._open or self._txn:
            self._record("info", "producer fatal error before the commit")
            self._open = False

    def _close(self, prod: Producer, timeout_s: float) -> None:
        if not self._open and self._txn:
            self._record("info", "sent while no transaction was open (the run was stopping)")
        if self._open:
            try:
                self._end(prod, flush_s=timeout_s, reopen=False)
            except KafkaException as e:  # a new producer could not be made: the ops are recorded already
                self.errors.append(f"{time.strftime('%H:%M:%S')} closing: {e.args[0].str()}")


class _Abort(Exception):
    """A send of the open transaction failed: the transaction must be aborted."""
