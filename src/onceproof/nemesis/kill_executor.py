"""``kill-executor``: SIGKILL the Spark executor JVM that is running a sink task, mid-transaction.

Deterministic, not hopeful (as ``kill-driver-in-commit-window``): a random executor kill between
micro-batches hits no task at all and tests nothing. So the nemesis asks the sink's pre-commit hook
(``pipeline/hooks.py``) to park the next task of one seeded sink partition after ``flush()`` and before
``commit_transaction()``, waits for that task to announce itself in ``sink.jsonl`` (``hold`` with its
Python worker's pid), asks the backend (:class:`onceproof.backends.base.SparkApp`) for the executor running that
task, and SIGKILLs it. The task's open Kafka
transaction must then be fenced by the retry's ``init_transactions()`` and the (batch, partition)
committed once by another attempt.

Evidence: the held task (batch, sink partition, attempt, worker pid), the executor id and pid, that the
pid is gone, and the retry that later committed or skipped the same (batch, partition).
``exercised`` is true when the killed executor provably held a running sink task. A sink without the
hook (``at-least-once``) gets a seeded-random executor instead, exercised only if Spark's driver log
reports a task lost on it (``ExecutorLostFailure``).
"""

from __future__ import annotations

import random
import re
import time

from onceproof.nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, SKIPPED, NemesisContext, Outcome, park_task, sink_events
from onceproof.pipeline import hooks
from onceproof.sinks.base import PRECOMMIT_HOOK, WRITE_HOLD


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
            return self._random_victim(ctx, rng, part)  # no task will announce itself: do not wait for one
        held = park_task(ctx, part, self.hold_ms, self.wait_for_task_s)
        if held is None:
            self.heal(ctx)
            if ctx.stop.is_set():
                return Outcome(SKIPPED, f"sink partition {part}", {"reason": "the run ended first"})
            return self._random_victim(ctx, rng, part)
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

    def _random_victim(self, ctx: NemesisContext, rng: random.Random, part: int) -> Outcome:
        execs = ctx.spark.executors()
        if not execs:
            return Outcome(SKIPPED, evidence={"reason": "no sink task held and no live executor"})
        execs.sort(key=lambda e: (e.id, e.pid))
        victim = execs[rng.randrange(len(execs))]
        eid, pid = victim.id, victim.pid
        why = ctx.spark.kill_executor(victim)
        ev = {"aim": "random executor (no sink task announced itself, or the sink has no pre-commit hook)",
              "sink_partition_asked": part, "executor_id": eid, "pid": pid, "gone_after": why is None,
              "executors_before": len(execs)}
        if why:
            return Outcome(NOT_EFFECTIVE, f"executor {eid}", {**ev, "reason": why})
        ev["task_lost_logged"] = _lost_task_logged(ctx, eid, wait_s=10)
        return Outcome(EFFECTIVE, f"executor {eid}", ev, exercised=ev["task_lost_logged"])

    def heal(self, ctx: NemesisContext) -> None:
        """Withdraw an unclaimed hold; Spark's master replaces the executor by itself."""
        (ctx.control / hooks.PRECOMMIT_HOLD).unlink(missing_ok=True)
