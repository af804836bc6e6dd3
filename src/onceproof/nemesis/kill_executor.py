"""``kill-executor``: SIGKILL the Spark executor JVM that is running a sink task, mid-transaction.

Deterministic, not hopeful (as ``kill-driver-in-commit-window``): a random executor kill between
micro-batches hits no task at all and tests nothing. So the nemesis asks the sink's pre-commit hook
(``pipeline/hooks.py``) to park the next task of one seeded sink partition after ``flush()`` and before
``commit_transaction()``, waits for that task to announce itself in ``sink.jsonl`` (``hold`` with its
Python worker's pid), asks the backend (:class:`onceproof.backends.base.SparkApp`) for the executor running that
task, and SIGKILLs it. The task's open Kafka
transaction must then be fenced by the retry's ``init_transactions()`` and the (batch, partition)
committed once by another attempt.

A sink known to have the hook is waited for up to ``retry_wait_s`` (a slow batch may leave the partition
short of its hold in the first ones); one of unknown capabilities for ``wait_for_task_s``.

Evidence: the held task (batch, sink partition, attempt, worker pid), the executor id and pid, that the
pid is gone, and the retry that later committed or skipped the same (batch, partition).
``exercised`` is true when the killed executor provably held a running sink task.

A sink without the hook (``at-least-once``, a user's ``--pipeline-cmd`` job) is aimed at a micro-batch
in flight instead: Spark's ``MicroBatchExecution`` logs ``offsets/N`` in the checkpoint before it runs
batch N's tasks and ``commits/N`` after they all finished, so the nemesis waits for a new ``offsets/N``
and, until ``commits/N`` appears, samples every executor JVM's CPU time (the backend's
``executor_cpu_s``) each :data:`POLL_S`:
the first executor busy for most of a poll (:data:`BUSY_SHARE` of a core; an idle executor only
heartbeats) and older than :data:`WARM_S` (a new JVM is busy compiling, not running tasks) is running
one of the batch's tasks, and is SIGKILLed. Where CPU times cannot be read (an executor in another pid
namespace), a seeded-random executor is killed after a seeded delay inside the window. The turn is
exercised when Spark's driver log reports a task lost on the killed executor (``TaskSetManager: Lost
task ... (executor <id>)``); a kill that lost no task is retried in a later batch, at most
:data:`BATCH_ATTEMPTS` kills per turn.
"""

from __future__ import annotations

import random
import re
import time

from onceproof.backends.base import Executor
from onceproof.nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, SKIPPED, NemesisContext, Outcome, park_task, sink_events
from onceproof.pipeline import hooks
from onceproof.sinks.base import PRECOMMIT_HOOK, WRITE_HOLD
from onceproof.store import checkpoint

BATCH_ATTEMPTS = 4
"""Kills per turn aimed at a micro-batch in flight before the turn gives up (each waits for a new batch)."""
BATCH_DELAYS_S = (0.1, 0.3, 0.6, 1.0)
"""Delay after a new ``offsets/N`` before the kill, per attempt (s; ± 30 %, seeded): the first batches'
tasks start soon after the offsets are logged, a slow batch's later."""
POLL_S = 0.02  # checkpoint and CPU poll interval while waiting for a new offsets/N and a busy executor
BUSY_SHARE = 0.5
"""An executor whose CPU time grew by at least this share of a poll's wall time is running a task."""
WARM_S = 8.0
"""Executors younger than this (s) are skipped: a new JVM's JIT keeps it busy without any task."""


def _lost_task_logged(ctx: NemesisContext, eid: str, wait_s: float) -> bool:
    """Spark's driver log reports a task lost on executor ``eid`` (``TaskSetManager: Lost task ...
    (... executor <eid>)``) within ``wait_s`` seconds."""
    pat = re.compile(rf"Lost task .*executor {re.escape(eid)}\)")
    log = ctx.spark.driver_log()
    deadline = time.monotonic() + wait_s
    while True:
        if log is not None and pat.search(log.read_text(errors="replace")[-2_000_000:]):
            return True
        if time.monotonic() >= deadline or ctx.stop.wait(1.0):
            return False


def _busy_executor(ctx: NemesisContext, batch: int, a: dict) -> Executor | None:
    """The first executor seen busy (:data:`BUSY_SHARE` of a core over one :data:`POLL_S`, older than
    :data:`WARM_S`) before ``commits/<batch>``; ``None`` with ``a["missed"]`` set, or with ``a["aim"]``
    turned to ``"delay"`` when no executor's CPU time can be read."""
    now = time.time()
    execs = [e for e in ctx.spark.executors() if not e.started or now - e.started >= WARM_S]
    if not execs:
        a["missed"] = "no warm executor"
        return None
    last = {e.pid: ctx.spark.executor_cpu_s(e) for e in execs}
    if all(v is None for v in last.values()):
        a["aim"] = "delay"  # CPU times unreadable here: fall back to a seeded delay
        return None
    t0 = time.monotonic()
    while not ctx.stop.wait(POLL_S):
        if checkpoint.has_commit(ctx.checkpoint, batch):
            a["missed"] = "no executor busy before commits/N"
            return None
        for e in execs:
            now_s = ctx.spark.executor_cpu_s(e)
            before = last.get(e.pid)
            last[e.pid] = now_s
            if now_s is not None and before is not None and now_s - before >= BUSY_SHARE * POLL_S:
                a["busy_after_s"] = round(time.monotonic() - t0, 3)
                a["cpu_ms_in_poll"] = round((now_s - before) * 1000, 1)
                return e
        if time.monotonic() - t0 > 30:
            a["missed"] = "no executor busy within 30 s"
            return None
    return None


def _after_delay(ctx: NemesisContext, rng: random.Random, batch: int, attempt: int, a: dict) -> Executor | None:
    """A seeded-random executor after a seeded delay inside the window (``BATCH_DELAYS_S``, longer at each
    attempt), or ``None`` with ``a["missed"]`` set when ``commits/<batch>`` came first."""
    delay = BATCH_DELAYS_S[min(attempt - 1, len(BATCH_DELAYS_S) - 1)] * rng.uniform(0.7, 1.3)
    a["delay_s"] = round(delay, 3)
    if ctx.stop.wait(delay):
        return None
    if checkpoint.has_commit(ctx.checkpoint, batch):
        a["missed"] = "commits/N logged before the kill"
        return None
    execs = sorted(ctx.spark.executors(), key=lambda e: (e.id, e.pid))
    if not execs:
        a["missed"] = "no live executor"
        return None
    return execs[rng.randrange(len(execs))]


def _new_batch(ctx: NemesisContext, deadline: float) -> int | None:
    """The next micro-batch N whose ``offsets/N`` appears (after this call) without ``commits/N``, seen
    within :data:`POLL_S`; ``None`` at ``deadline`` (monotonic s) or when the run stops."""
    seen = checkpoint.latest_offset_batch(ctx.checkpoint)
    while time.monotonic() < deadline and not ctx.stop.wait(POLL_S):
        n = checkpoint.latest_offset_batch(ctx.checkpoint)
        if n is not None and n != seen:
            if not checkpoint.has_commit(ctx.checkpoint, n):
                return n
            seen = n
    return None


class KillExecutor:
    name = "kill-executor"

    @staticmethod
    def expected_s(target: str, hold_s: float, txn_timeout_ms: int) -> float:
        """Expected length of one turn, seconds (see ``onceproof.nemesis.catalog.expected_s``)."""
        return 15.0  # a held task, the kill, Spark's retry on a replacement executor

    def __init__(self, wait_for_task_s: float = 30.0, txn_timeout_ms: int = 30000, retry_wait_s: float = 60.0):
        self.wait_for_task_s = wait_for_task_s
        self.retry_wait_s = retry_wait_s
        # long enough to be killed in, short enough not to meet transaction.timeout.ms first
        self.hold_ms = int(max(2000, min(15000, txn_timeout_ms // 2)))

    def invoke(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        partitions = max(1, len(ctx.sink_ids))
        part = rng.randrange(partitions)
        if ctx.sink_capabilities is not None and not ctx.sink_capabilities & {PRECOMMIT_HOOK, WRITE_HOLD}:
            return self._in_batch(ctx, rng)  # no task will announce itself: aim at the batch window
        # a sink known to have the hook holds a task in some later batch, even when slow batches (a loaded
        # machine) leave the partition short of the hold's row in the first ones: wait the longer retry
        # time before the weaker aim; an unknown sink (None) may never announce a task
        wait_s = self.wait_for_task_s if ctx.sink_capabilities is None else max(self.wait_for_task_s,
                                                                               self.retry_wait_s)
        held = park_task(ctx, part, self.hold_ms, wait_s)
        if held is None:
            self.heal(ctx)
            if ctx.stop.is_set():
                return Outcome(SKIPPED, f"sink partition {part}", {"reason": "the run ended first"})
            return self._in_batch(ctx, rng)  # a pipeline whose sink has no hook (a user's job)
        victim = ctx.spark.executor_of(int(held["pid"]))
        ev = {"aim": "executor holding a sink task", "sink_partition": part,
              "held": {k: held.get(k) for k in ("batch", "partition", "attempt", "incarnation", "txn_id", "pid")}}
        if victim is None:
            return Outcome(NOT_EFFECTIVE, f"sink partition {part}", {**ev, "reason": "no executor above the task"})
        eid = victim.id
        why = ctx.spark.kill_executor(victim)
        ev.update(executor_id=eid, pid=victim.pid, gone_after=why is None)
        if why:
            return Outcome(NOT_EFFECTIVE, f"executor {eid}", {**ev, "reason": why})
        retry = self._retry(ctx, held)
        ev["retried_by"] = retry
        return Outcome(EFFECTIVE, f"executor {eid} (sink partition {part})", ev, exercised=True)

    def _retry(self, ctx: NemesisContext, held: dict) -> dict | None:
        """The later commit/skip of the held (batch, partition) by another task (≤ ``retry_wait_s``)."""
        deadline = time.monotonic() + self.retry_wait_s
        key = (held.get("batch"), held.get("partition"))
        while True:
            for e in sink_events(ctx.control.parent, held["time"]):
                if e["event"] in ("commit", "skip") and (e.get("batch"), e.get("partition")) == key \
                        and e.get("pid") != held.get("pid"):
                    return {k: e.get(k) for k in ("event", "attempt", "incarnation", "pid")}
            if time.monotonic() >= deadline or ctx.stop.wait(0.5):
                return None

    def _in_batch(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        """Kill an executor while a micro-batch is in flight (module docstring), retried until Spark reports a
        task lost, at most :data:`BATCH_ATTEMPTS` kills within ``retry_wait_s`` s."""
        attempts: list[dict] = []
        deadline = time.monotonic() + self.retry_wait_s
        ev = {"aim": "executor during a micro-batch (offsets/N logged, commits/N not)", "attempts": attempts}
        while sum("executor_id" in a for a in attempts) < BATCH_ATTEMPTS:
            batch = _new_batch(ctx, deadline)
            if batch is None:
                break
            a: dict = {"batch": batch, "aim": "busy"}
            attempts.append(a)
            victim = _busy_executor(ctx, batch, a)
            if victim is None and a["aim"] == "delay":
                victim = _after_delay(ctx, rng, batch, len(attempts), a)
            if victim is None:
                continue
            why = ctx.spark.kill_executor(victim)
            a.update(executor_id=victim.id, pid=victim.pid, gone_after=why is None)
            if why:
                a["missed"] = why
                continue
            a["commit_logged_at_kill"] = checkpoint.has_commit(ctx.checkpoint, batch)
            a["task_lost_logged"] = _lost_task_logged(ctx, victim.id, wait_s=10)
            if a["task_lost_logged"]:
                return Outcome(EFFECTIVE, f"executor {victim.id} (batch {batch})", ev, exercised=True)
        killed = [a for a in attempts if a.get("gone_after")]
        if not killed:
            ev["reason"] = "no executor killed inside a batch window before the turn ended"
            return Outcome(NOT_EFFECTIVE if attempts else SKIPPED, evidence=ev)
        return Outcome(EFFECTIVE, f"executor {killed[-1]['executor_id']}", ev, exercised=False)

    def heal(self, ctx: NemesisContext) -> None:
        """Withdraw an unclaimed hold; Spark's master replaces the executor by itself."""
        (ctx.control / hooks.PRECOMMIT_HOLD).unlink(missing_ok=True)
