"""``kill-executor``: SIGKILL one Spark executor JVM (its Python workers die with it).

Target: one executor of the current driver, chosen by the seeded RNG among the live executors sorted
by executor id. Evidence: executor id, pid, and that the pid is gone afterwards. The standalone
master in ``local-cluster`` mode starts a replacement executor; tasks that ran on the dead one are
retried by Spark, and their open Kafka transactions are fenced by the retry's ``init_transactions()``.
"""

from __future__ import annotations

import random
import signal
import time

import psutil

from harness.supervisor import executor_id
from nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, SKIPPED, NemesisContext, Outcome


class KillExecutor:
    name = "kill-executor"

    def __init__(self, wait_for_target_s: float = 60.0):
        self.wait_for_target_s = wait_for_target_s

    def invoke(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        deadline = time.monotonic() + self.wait_for_target_s
        execs = ctx.supervisor.executors()
        while not execs and time.monotonic() < deadline and not ctx.stop.is_set():
            time.sleep(0.5)
            execs = ctx.supervisor.executors()
        if not execs:
            return Outcome(SKIPPED, evidence={"reason": f"no live executor within {self.wait_for_target_s}s"})
        execs.sort(key=lambda p: (executor_id(p), p.pid))
        victim = execs[rng.randrange(len(execs))]
        eid, pid = executor_id(victim), victim.pid
        try:
            status = victim.status()
            victim.send_signal(signal.SIGKILL)
            victim.wait(timeout=10)
        except psutil.NoSuchProcess:
            return Outcome(NOT_EFFECTIVE, f"executor {eid}", {"pid": pid, "reason": "exited before the kill"})
        except psutil.TimeoutExpired:
            return Outcome(NOT_EFFECTIVE, f"executor {eid}", {"pid": pid, "reason": "still alive 10 s after SIGKILL"})
        return Outcome(EFFECTIVE, f"executor {eid}",
                       {"pid": pid, "executor_id": eid, "status_before": status, "gone_after": True,
                        "executors_before": len(execs)})

    def heal(self, ctx: NemesisContext) -> None:
        """Nothing to undo: Spark's master replaces the executor."""
