"""``zombie-task``: a sink task that Spark gave up on comes back to life and talks to Kafka.

The classic reason for fencing (KIP-98's producer epoch) and for a "≥" marker check: an executor cut off
from the driver (a long GC pause, a network partition) is declared lost, its task is retried elsewhere
and committed, and then the old attempt resumes. Deterministic, not hopeful: the nemesis asks the
sink's zombie hook (``pipeline/hooks.py``, ``zombie_point``) to turn the next task of one seeded sink
partition into a zombie at one of two points, SIGKILLs the executor JVM above it (the Python worker
survives: it ignores the SIGHUP PySpark's daemon sends when its executor dies), waits for Spark's retry
to commit (or skip) the same (batch, partition), and then lets the zombie go on with its real producer:

* ``precommit`` – the zombie holds an open transaction (rows produced and flushed) and resumes at
  ``send_offsets_to_transaction`` + ``commit_transaction()``. The retry's ``init_transactions()`` on the
  same ``transactional.id`` must have fenced it: its commit must fail (``PRODUCER_FENCED`` /
  ``INVALID_PRODUCER_EPOCH``). A sink that gives every attempt its own id (``eos-no-fencing``) commits
  the rows twice.
* ``preinit`` – the zombie has its rows but has not called ``init_transactions()``; it resumes only
  after a *later* batch committed on the same sink partition, so the marker it reads is past its batch
  and it must skip. A sink that skips only on ``marker == batchId`` (``eos-marker-equal``) writes the
  old batch again.

Evidence: the zombie (pid, batch, partition, attempt, stage), the executor killed, Spark's retry of the
(batch, partition), the later batch waited for (``preinit``) and the zombie's own outcome from
``sink.jsonl`` (``commit``: it committed; ``skip``; ``abandon``/``abort``/``commit-unknown`` with the
error: fenced). ``exercised`` is true when the zombie resumed after the retry and reached an outcome.
Needs the sink's hooks (``sinks/base.py`` ``PRECOMMIT_HOOK``) and an executor whose JVM can be
killed alone (the local backend).
"""

from __future__ import annotations

import json
import random
import time

from onceproof.nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, SKIPPED, NemesisContext, Outcome, wait_sink_event
from onceproof.pipeline import hooks
from onceproof.sinks.base import PRECOMMIT_HOOK, TRANSACTIONS

_OUTCOMES = ("commit", "skip", "abandon", "abort", "commit-unknown", "abort-failed", "init-error", "marker-error")


class ZombieTask:
    name = "zombie-task"
    target_choices = hooks.ZOMBIE_STAGES

    @staticmethod
    def expected_s(target: str, hold_s: float, txn_timeout_ms: int) -> float:
        """Expected length of one turn, seconds (see ``onceproof.nemesis.catalog.expected_s``)."""
        return 25.0  # a task parked, its executor killed and replaced, the retry, the zombie's outcome

    @staticmethod
    def sink_needs(target: str) -> frozenset[str]:
        """The sink's tasks must run the zombie hook (the transactional sink's)."""
        return frozenset({PRECOMMIT_HOOK, TRANSACTIONS})

    def __init__(self, target: str | None = None, wait_for_task_s: float = 30.0, retry_wait_s: float = 60.0):
        if target is not None and target not in hooks.ZOMBIE_STAGES:
            raise ValueError(f"unknown zombie-task target {target!r}; choose from {', '.join(hooks.ZOMBIE_STAGES)}")
        self.target, self.wait_for_task_s, self.retry_wait_s = target, wait_for_task_s, retry_wait_s

    def invoke(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        stage = self.target or rng.choice(list(hooks.ZOMBIE_STAGES))
        part = rng.randrange(max(1, len(ctx.sink_ids)))
        t0 = time.time()
        (ctx.control / hooks.ZOMBIE_RELEASE).unlink(missing_ok=True)
        spec = ctx.control / hooks.ZOMBIE.format(stage=stage)
        tmp = spec.with_name(spec.name + ".tmp")
        tmp.write_text(json.dumps({"partition": part}))
        tmp.replace(spec)
        z = wait_sink_event(ctx, t0, lambda e: e["event"] == "zombie" and e.get("stage") == stage
                             and e.get("partition") == part, self.wait_for_task_s)
        if z is None:
            spec.unlink(missing_ok=True)
            why = "the run ended first" if ctx.stop.is_set() else f"no task of sink partition {part} reached {stage}"
            return Outcome(SKIPPED, f"{stage} sink partition {part}", {"reason": why})
        ev: dict = {"stage": stage, "zombie": {k: z.get(k) for k in ("batch", "partition", "attempt", "incarnation",
                                                                       "txn_id", "zombie_pid")}}
        key = (z["batch"], z["partition"])
        victim = ctx.spark.executor_of(int(z["zombie_pid"]), z.get("host"))
        if victim is None:
            self._release(ctx)
            return Outcome(NOT_EFFECTIVE, f"{stage} sink partition {part}",
                           {**ev, "reason": "no executor above the task"})
        why = ctx.spark.kill_executor(victim)
        ev.update(executor_id=victim.id, executor_pid=victim.pid)
        if why:
            self._release(ctx)
            return Outcome(NOT_EFFECTIVE, f"executor {victim.id}", {**ev, "reason": why})
        retry = wait_sink_event(ctx, z["time"], lambda e: e["event"] in ("commit", "skip")
                                 and (e.get("batch"), e.get("partition")) == key and e.get("pid") != z["zombie_pid"],
                                 self.retry_wait_s)
        ev["retried_by"] = retry and {k: retry.get(k) for k in ("event", "attempt", "incarnation", "pid", "txn_id")}
        if stage == "preinit" and retry is not None:
            later = wait_sink_event(ctx, retry["time"], lambda e: e["event"] in ("commit", "skip")
                                     and e.get("partition") == part and e.get("batch", -1) > z["batch"],
                                     self.retry_wait_s)
            ev["later_batch"] = later and later.get("batch")
        released_at = time.time()
        self._release(ctx)
        out = wait_sink_event(ctx, released_at, lambda e: e.get("pid") == z["zombie_pid"] and e["event"] in _OUTCOMES
                               and e.get("batch") == z["batch"], 60.0)
        ev["zombie_outcome"] = out and {k: out.get(k) for k in ("event", "error_code", "kind", "stage", "marker",
                                                                  "records")}
        exercised = (retry is not None and out is not None
                     and (stage == "precommit" or ev.get("later_batch") is not None))
        return Outcome(EFFECTIVE, f"{stage} zombie of sink partition {part} (executor {victim.id})", ev,
                       exercised=exercised)

    def _release(self, ctx: NemesisContext) -> None:
        (ctx.control / hooks.ZOMBIE_RELEASE).write_text(str(time.time()))

    def heal(self, ctx: NemesisContext) -> None:
        """Withdraw unclaimed zombie specs, release any waiting zombie, and SIGKILL zombies still alive
        (their pids in ``zombie.pids``) so no Python worker outlives the run."""
        for stage in hooks.ZOMBIE_STAGES:
            (ctx.control / hooks.ZOMBIE.format(stage=stage)).unlink(missing_ok=True)
        if ctx.control.exists():
            self._release(ctx)
        try:
            pids = [int(x) for x in (ctx.control / hooks.ZOMBIE_PIDS).read_text().split()]
        except (FileNotFoundError, ValueError):
            return
        if not ctx.teardown.is_set():
            time.sleep(1.0)  # a released zombie finishes its last Kafka call and exits by itself
        if ctx.spark is None:
            return
        for pid in pids:
            ctx.spark.kill_task(pid)
