"""``clock-skew``: a broker's own clock jumps (forward or back) for the hold, then back to the real time;
the host's clock never changes (the backend's :class:`onceproof.backends.base.ClockFaults`: libfaketime's
control file on the local backend, ``backends/common/faketime.py``).

The broker is the **transaction coordinator** of one sink ``transactional.id`` (``nemesis/targets.py``):
its wall clock decides when a transaction has outlived ``transaction.timeout.ms``. The coordinator stamps a
transaction's start when its first partition is added (``txnStartTimestamp``) and, every
``transaction.abort.timed.out.transaction.cleanup.interval.ms`` (5000 ms here, ``broker_config.py``; a
timer on the monotonic clock), aborts each ongoing transaction whose start plus its timeout lies before its
``time.milliseconds()`` and bumps the producer's epoch (KIP-98; Kafka's ``TransactionCoordinator``, which
logs ``Completed rollback of ongoing transaction for transactionalId <id> due to timeout``). So a jump of
``transaction.timeout.ms`` + :data:`MARGIN_S` aborts transactions that are not old at all:

* ``broker-jump-forward`` – a sink task of that id's partition is parked first in the pre-commit hook
  (``pipeline/hooks.py``: its transaction is open, rows produced), then the coordinator's clock jumps
  forward: its next check aborts the parked transaction, whose commit must then fail and be retried;
* ``broker-jump-back`` – the clock jumps back, then a task is parked: its transaction starts under the
  skewed clock. The reset to the real time is itself a forward jump of the same size, and the next check
  aborts it.

Without the pre-commit hook (a sink without it, or a ``--pipeline-cmd`` job whose hooks are unknown but tried
anyway) nothing is parked: a turn aborts whatever sink transaction happens to be open at the check.

Evidence, the broker's own view of time: a **LogAppendTime probe** – one record produced to a probe topic
(``onceproof-clock-<node>``: one partition, its only replica on the broker, ``message.timestamp.type=
LogAppendTime``), whose produce response carries the time the broker appended it (Kafka protocol,
ProduceResponse ``log_append_time_ms``; KIP-32) – compared with the harness's clock at the midpoint of the
round trip, before, during and after; and the broker's log lines (log4j's ``[%d]`` is its own clock)
written during the hold, against the harness's time when they were read. Effective: the skew measured
during the hold is the offset within :data:`TOLERANCE_S`. Exercised: the coordinator logged the timeout
rollback of a sink ``transactional.id`` during the turn (a transaction of the pipeline aborted by the
clock), with the failed attempt and its retry in ``sink.jsonl`` when a task was parked. Not exercised, with
the reason, when no sink transaction was open at the coordinator's check (the at-least-once sink has none).

Heal: every broker's offset back to ``+0`` (at the end of the turn, in :meth:`ClockSkew.heal`, and by the
cluster's ``down``). A SIGKILLed harness leaves no skewed process: the brokers die with it (``PR_SET_PDEATHSIG``)
and the reaper sweeps what is left and puts the run's offset files back to ``+0``.
"""

from __future__ import annotations

import logging
import random
import re
import statistics
import time
from datetime import datetime

from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from onceproof.backends.base import ClockFaults, LogSource
from onceproof.clients import topics
from onceproof.kafka_config import client_config
from onceproof.nemesis import broker_log, targets
from onceproof.nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, SKIPPED, NemesisContext, Outcome, park_task, sink_events
from onceproof.pipeline import hooks
from onceproof.sinks.base import PRECOMMIT_HOOK, TRANSACTIONS

VARIANTS = ("broker-jump-forward", "broker-jump-back")
MARGIN_S = 30
"""The jump is ``transaction.timeout.ms`` + this many seconds: every open transaction then looks timed out."""
ABORT_CHECK_S = 5.0
"""``transaction.abort.timed.out.transaction.cleanup.interval.ms`` of the brokers here (``broker_config.py``)."""
ABORT_WAIT_S = ABORT_CHECK_S + 6.0
"""How long a turn waits for the rollback after the jump that makes the transaction old (s): one check
interval, libfaketime's cache (``faketime.CACHE_S``) and some slack."""
PARK_MS = 60_000
"""The longest a parked task holds its open transaction (ms); the turn releases it as soon as it is done."""
PARK_WAIT_S = 20.0
"""How long a turn waits for a task of the chosen partition to reach the pre-commit hook (s)."""
TOLERANCE_S = 2.0
"""How far the measured skew may be from the offset (s): the probe's round trip and the cache."""
PROBE_WAIT_S = 8.0
"""How long a turn polls the probe for the new offset to show (s)."""
ROLLBACK = re.compile(r"Completed rollback of ongoing transaction for transactionalId (\S+) due to timeout")
_LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")
FAILED_ATTEMPT = ("abort", "abandon", "commit-unknown", "abort-failed")  # as commit_delay.FAILED_ATTEMPT
log = logging.getLogger("onceproof.nemesis")


def skew_s(sent: float, acked: float, broker_ms: int) -> float:
    """The broker's clock minus the harness's (s): ``broker_ms`` (epoch ms, its LogAppendTime) against the
    midpoint of ``sent`` and ``acked`` (epoch s). Its error is at most half the round trip."""
    return round(broker_ms / 1000 - (sent + acked) / 2, 3)


def log_time(line: str) -> float | None:
    """Epoch s of a broker log line's ``[yyyy-MM-dd HH:mm:ss,SSS]`` (log4j's ``%d``, the JVM's local time
    zone, taken to be this process's), ``None`` for a line without one."""
    m = _LOG_TIME.match(line)
    if m is None:
        return None
    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()


def rollbacks(lines: list[str], ids: list[str]) -> list[dict]:
    """The coordinator's timeout rollbacks (:data:`ROLLBACK`) among ``lines`` whose id is one of ``ids``:
    ``[{"txn_id", "logged_at"}]`` (``logged_at``: the line's own epoch s, ``None`` without a time)."""
    out = []
    for ln in lines:
        m = ROLLBACK.search(ln)
        if m and m.group(1) in ids:
            out.append({"txn_id": m.group(1), "logged_at": log_time(ln)})
    return out


def judge(offset_s: float, during: dict | None, log_skews: list[float]) -> bool:
    """Did the clock move? The probe during the hold measured ``offset_s`` within :data:`TOLERANCE_S`, or,
    without a probe answer, the median skew of the log lines written in the hold did. Pure."""
    if during and during.get("ok"):
        return abs(during["skew_s"] - offset_s) <= TOLERANCE_S
    return bool(log_skews) and abs(statistics.median(log_skews) - offset_s) <= TOLERANCE_S + 1.0


def probe_topic(node: int) -> NewTopic:
    """The probe topic of broker ``node``: ``onceproof-clock-<node>``, one partition whose only replica is
    ``node``, ``message.timestamp.type=LogAppendTime``, ``min.insync.replicas=1`` (the brokers' default is 2).
    The partition count is given with the assignment: librdkafka refuses a default count with one."""
    return NewTopic(f"onceproof-clock-{node}", num_partitions=1, replica_assignment=[[node]],
                    config={"message.timestamp.type": "LogAppendTime", "min.insync.replicas": "1"})


def _has_clocks(cluster) -> bool:
    """The cluster's class implements :class:`ClockFaults` (asked of the class: an instance's missing
    attribute is not looked up)."""
    return cluster is not None and issubclass(type(cluster), ClockFaults)


class ClockProbe:
    """LogAppendTime probe of one broker (module docstring): a probe topic with its only replica on ``node``
    and a producer (``acks=1``) whose delivery reports carry the broker's append time.

    Raises (on construction): ``KafkaException`` when the topic cannot be created."""

    def __init__(self, bootstrap: str, node: int):
        self.bootstrap, self.node, self.topic = bootstrap, node, f"onceproof-clock-{node}"
        self.admin = topics.admin(bootstrap)  # kept: a collected client fails its futures (_DESTROY)
        fut = self.admin.create_topics([probe_topic(node)])
        try:
            fut[self.topic].result(timeout=15)
        except Exception as e:  # noqa: BLE001 - a leftover topic of an earlier turn is as good
            if "TOPIC_ALREADY_EXISTS" not in str(e) and "already exists" not in str(e):
                raise
        self.producer = Producer(client_config(bootstrap, {"acks": 1, "linger.ms": 0, "enable.idempotence": False,
                                                           "message.timeout.ms": 5000},
                                               logger=logging.getLogger("onceproof.librdkafka.clock")))

    def measure(self) -> dict:
        """One record: ``{"ok": True, "skew_s", "rtt_ms", "at"}`` (``at``: the harness's epoch s) or
        ``{"ok": False, "error"}``."""
        got: list = []
        sent = time.time()
        self.producer.produce(self.topic, b"clock", partition=0, on_delivery=lambda err, msg: got.append((err, msg)))
        self.producer.flush(7)
        acked = time.time()
        if not got:
            return {"ok": False, "error": "no delivery report in 7 s", "at": round(acked, 3)}
        err, msg = got[0]
        if err is not None:
            return {"ok": False, "error": str(err)[:120], "at": round(acked, 3)}
        kind, ms = msg.timestamp()
        if kind != 2:  # confluent_kafka.TIMESTAMP_LOG_APPEND_TIME
            return {"ok": False, "error": f"timestamp type {kind}, not LogAppendTime", "at": round(acked, 3)}
        return {"ok": True, "skew_s": skew_s(sent, acked, ms), "rtt_ms": round((acked - sent) * 1000, 1),
                "at": round(acked, 3)}

    def until(self, offset_s: float, max_s: float = PROBE_WAIT_S) -> dict:
        """Measure every 0.3 s until the skew is ``offset_s`` within :data:`TOLERANCE_S` or ``max_s`` s have
        passed; the last measurement with ``waited_s``."""
        t0 = time.monotonic()
        while True:
            m = self.measure()
            if (m["ok"] and abs(m["skew_s"] - offset_s) <= TOLERANCE_S) or time.monotonic() - t0 >= max_s:
                m["waited_s"] = round(time.monotonic() - t0, 2)
                return m
            time.sleep(0.3)

    def close(self) -> None:
        """Delete the probe topic (best effort)."""
        try:
            self.admin.delete_topics([self.topic])[self.topic].result(timeout=10)
        except Exception as e:  # noqa: BLE001 - a leftover probe topic harms nothing
            log.info("could not delete %s: %s", self.topic, e)


class LogTail:
    """New lines of a broker's log (a :class:`~onceproof.backends.base.LogSource`, ``nemesis/broker_log.py``)
    since construction (whole lines only), each with the harness's epoch time when it was read."""

    def __init__(self, source: LogSource | None):
        self.source = source
        self.pos = source.size() if source is not None else 0
        self.buf = b""
        self.lines: list[tuple[str, float]] = []

    def poll(self) -> list[tuple[str, float]]:
        """Read what was appended since the last poll; returns the new ``(line, read_at)``."""
        if self.source is None:
            return []
        data = self.source.read_from(self.pos)
        self.pos += len(data)
        *whole, self.buf = (self.buf + data).split(b"\n")
        now = time.time()
        new = [(ln.decode(errors="replace"), now) for ln in whole]
        self.lines += new
        return new


class ClockSkew:
    """Jump one broker's clock (the transaction coordinator of a sink ``transactional.id``) forward or back by
    ``transaction.timeout.ms`` + 30 s for the hold, then back to the real time (libfaketime)."""

    name = "clock-skew"
    target_choices = VARIANTS

    @staticmethod
    def expected_s(target: str, hold_s: float, txn_timeout_ms: int) -> float:
        """Expected length of one turn, seconds (see ``onceproof.nemesis.catalog.expected_s``): the park,
        the probes, the hold (at least until the coordinator's check), the rollback's wait and the retry."""
        return max(hold_s, ABORT_WAIT_S) + (ABORT_WAIT_S if target != "broker-jump-forward" else 0) + 20.0

    @staticmethod
    def sink_needs(target: str) -> frozenset[str]:
        """Sink capabilities (``sinks/base.py``) a turn needs: Kafka transactions, the only thing the
        coordinator's clock can abort (the pre-commit hook, when the sink has one, aims it). The at-least-once
        sink has none: a run of it under these faults found no ``__transaction_state`` partition to aim at,
        every turn skipped, verdict unknown; so such a run is refused before it starts."""
        return frozenset({TRANSACTIONS})

    def __init__(self, target: str | None = None, txn_timeout_ms: int = 30000):
        if target is not None and target not in VARIANTS:
            raise ValueError(f"unknown clock-skew target {target!r}; choose from {', '.join(VARIANTS)}")
        self.target, self.txn_timeout_ms = target, txn_timeout_ms

    def offset_s(self, variant: str) -> int:
        """The jump (s): ``±(transaction.timeout.ms / 1000 + MARGIN_S)``, rounded up to whole seconds."""
        size = -(-self.txn_timeout_ms // 1000) + MARGIN_S
        return size if variant == "broker-jump-forward" else -size

    def invoke(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        variant = self.target or rng.choice(list(VARIANTS))
        cluster = ctx.cluster
        if not _has_clocks(cluster):
            return Outcome(SKIPPED, variant, {"reason": "this backend's cluster cannot offset a broker's clock"})
        why = cluster.clock_unavailable()
        if why:
            return Outcome(SKIPPED, variant, {"reason": why})
        if not ctx.sink_ids:
            return Outcome(SKIPPED, variant, {"reason": "no sink transactional.id to aim at"})
        part = rng.randrange(len(ctx.sink_ids))
        txn_id = ctx.sink_ids[part]
        node, tsp = targets.txn_coordinator(cluster.bootstrap, txn_id)
        if tsp == -1:
            return Outcome(SKIPPED, variant, {"reason": f"no {targets.TXN_STATE_TOPIC} topic yet (no transaction "
                                                        f"begun on this cluster): no coordinator for {txn_id}"})
        if node == -1 or not cluster.state(node).alive:
            return Outcome(SKIPPED, variant, {"reason": f"no live coordinator for {txn_id}",
                                              "txn_state_partition": tsp})
        offset = self.offset_s(variant)
        caps = ctx.sink_capabilities
        park = caps is None or {PRECOMMIT_HOOK, TRANSACTIONS} <= caps
        target = f"{variant}: broker {node} ({offset:+d} s)"
        ev: dict = {"variant": variant, "node": node, "role": "txn-coordinator", "transactional_id": txn_id,
                    "txn_state_partition": tsp, "offset_s": offset, "transaction_timeout_ms": self.txn_timeout_ms,
                    "parked": park}
        probe = ClockProbe(cluster.bootstrap, node)
        tail = LogTail(broker_log.broker_log(cluster, node))
        t0 = time.time()
        held = None
        try:
            ev["probe_before"] = probe.measure()
            if variant == "broker-jump-forward":
                held = park_task(ctx, part, PARK_MS, PARK_WAIT_S) if park else None
                cluster.set_clock_offset(node, offset)
                set_at = time.monotonic()
                ev["probe_during"] = probe.until(offset)
                skews = self._hold(ctx, tail, set_at, offset, ctx.sink_ids, ev)
            else:
                cluster.set_clock_offset(node, offset)
                set_at = time.monotonic()
                ev["probe_during"] = probe.until(offset)
                held = park_task(ctx, part, PARK_MS, PARK_WAIT_S) if park else None
                skews = self._hold(ctx, tail, set_at, offset, [], ev)  # the abort comes with the reset
            ev["log_skews_s"] = skews[:20]
        finally:
            cluster.set_clock_offset(node, 0)
            reset_at = time.monotonic()
        try:
            if variant == "broker-jump-back":
                self._wait_rollback(ctx, tail, reset_at, ctx.sink_ids)
            ev["probe_after"] = probe.until(0)
            ev["offset_after_s"] = cluster.clock_offset(node)
        finally:
            released = hooks.release_holds(ctx.control)
            probe.close()
        tail.poll()
        ev["rollbacks"] = rollbacks([ln for ln, _ in tail.lines], ctx.sink_ids)
        ev["held_s"] = round(time.time() - t0, 2)
        if held is not None:
            ev["held"] = {k: held.get(k) for k in ("batch", "partition", "attempt", "txn_id")}
            ev["released_holds"] = released
            ev["held_attempt"] = self._held_fate(ctx, held, t0)
        effective = judge(offset, ev.get("probe_during"), skews)
        exercised = bool(ev["rollbacks"])
        if not exercised:
            no_txn = caps is not None and TRANSACTIONS not in caps
            ev["not_exercised"] = ("the sink writes no Kafka transactions" if no_txn
                                   else "no sink transaction was open at the coordinator's timeout check"
                                   + ("" if held else " (no task parked)"))
        return Outcome(EFFECTIVE if effective else NOT_EFFECTIVE, target, ev, exercised=exercised)

    def _hold(self, ctx: NemesisContext, tail: LogTail, set_at: float, offset: int, ids: list[str],
              ev: dict) -> list[float]:
        """Keep the offset for the hold, and (``ids`` given) until a rollback of one of ``ids`` is logged or
        :data:`ABORT_WAIT_S` after ``set_at`` (monotonic s); returns the skews (s) of the log lines written
        meanwhile (from libfaketime's cache on: their time minus the harness's when read)."""
        skews: list[float] = []
        min_s = max(ctx.hold_s, ABORT_WAIT_S) if ids else ctx.hold_s
        while not ctx.stop.is_set():
            for ln, read_at in tail.poll():
                t = log_time(ln)
                if t is not None and time.monotonic() - set_at > 1.5:
                    skews.append(round(t - read_at, 3))
            el = time.monotonic() - set_at
            if el >= ctx.hold_s and (not ids or rollbacks([ln for ln, _ in tail.lines], ids) or el >= min_s):
                break
            ctx.stop.wait(0.3)
        if skews:
            ev["log_skew_median_s"] = round(statistics.median(skews), 3)
        return skews

    def _wait_rollback(self, ctx: NemesisContext, tail: LogTail, since: float, ids: list[str]) -> None:
        """Poll the log until a rollback of one of ``ids`` shows or :data:`ABORT_WAIT_S` after ``since``."""
        while time.monotonic() - since < ABORT_WAIT_S and not ctx.stop.is_set():
            tail.poll()
            if rollbacks([ln for ln, _ in tail.lines], ids):
                return
            ctx.stop.wait(0.3)

    @staticmethod
    def _held_fate(ctx: NemesisContext, held: dict, since: float, wait_s: float = 20.0) -> dict:
        """What became of the parked attempt's (batch, partition) in ``sink.jsonl``: its failed attempt
        (:data:`FAILED_ATTEMPT`) and the later commit or skip, waited for up to ``wait_s`` s."""
        key = (held.get("batch"), held.get("partition"))
        deadline = time.monotonic() + wait_s
        out: dict = {}
        while True:
            events = [e for e in sink_events(ctx.control.parent, since) if (e.get("batch"), e.get("partition")) == key]
            failed = next((e for e in events if e["event"] in FAILED_ATTEMPT), None)
            later = next((e for e in events if e["event"] in ("commit", "skip")
                          and e.get("time", 0) > held.get("time", 0)), None)
            if failed:
                out["failed"] = {"event": failed["event"], "attempt": failed.get("attempt"),
                                 "error": str(failed.get("error", ""))[:160]}
            if later:
                out["then"] = {"event": later["event"], "attempt": later.get("attempt")}
            if (failed and later) or time.monotonic() >= deadline or ctx.stop.wait(0.5):
                return out

    def heal(self, ctx: NemesisContext) -> None:
        """Every broker's clock back to the real time (safe at any time, repeatedly)."""
        cluster = ctx.cluster
        if _has_clocks(cluster) and cluster.clock_unavailable() is None:
            for n in cluster.nodes:
                if cluster.clock_offset(n) != 0:
                    cluster.set_clock_offset(n, 0)
