"""``restart-mid-txn``: SIGKILL the driver while a sink task holds an open transaction, and hold back the
restarted query's first task of that sink partition, so that only a sink that settles what its dead
predecessor left open *at start* (Flink's abort-on-restore; ``abort_leftovers`` in
``pipeline/transactional_sink.py``) frees the output at once.

Why: a transaction left open by a dead driver pins the last stable offset (LSO) of every output partition
it wrote to, so read_committed readers see nothing newer — not even what other tasks committed since —
until somebody aborts it: the restarted query at start, the replayed task's ``init_transactions()`` on
the same ``transactional.id``, or the coordinator at ``transaction.timeout.ms`` (Flink's Kafka sink docs
recommend 15 min). A sink that leaves it to the replayed task (``eos-no-abort-on-start``) stalls the
output for as long as that task is late — here, deliberately, :data:`HOLD_S` seconds — and the liveness
checker's ``leftover-transaction`` (``checkers/liveness.py``) names it.

One turn: park the next task of a seeded sink partition after ``flush()`` (its transaction open, its
records written), write a ``zombie.preinit`` spec for that partition (``pipeline/hooks.zombie_point``:
the next task of that partition to reach ``init_transactions()`` waits for ``zombie.release``), SIGKILL
the driver, wait for the restarted query's task of that partition to claim the spec, hold it
:data:`HOLD_S` seconds, release it and wait for its commit or skip.

Evidence: the parked transaction (batch, partition, txn_id, incarnation), ``killed_at`` (epoch s), the
held task of the new incarnation and how long it was held, whether the new incarnation settled the
partition's id at start (``fence-on-start`` in ``sink.jsonl``), and the task's outcome. ``exercised``
when the parked transaction was open at the kill and the new incarnation's task was held.
"""

from __future__ import annotations

import json
import random
import time

from onceproof.nemesis.fault import (
    EFFECTIVE,
    NOT_EFFECTIVE,
    SKIPPED,
    NemesisContext,
    Outcome,
    hold,
    park_task,
    sink_events,
    wait_sink_event,
)
from onceproof.pipeline import hooks
from onceproof.sinks.base import PRECOMMIT_HOOK, TRANSACTIONS

HOLD_S = 30.0
"""Seconds the restarted query's first task of the partition is held before ``init_transactions()``."""
PARK_MS = 120_000  # the old task's hold: it must still hold its open transaction when the driver dies
RESTART_WAIT_S = 150.0  # the supervisor's restart (~20 s on 2 cores) and the replay's first tasks


class RestartMidTxn:
    name = "restart-mid-txn"

    @staticmethod
    def expected_s(target: str, hold_s: float, txn_timeout_ms: int) -> float:
        """Expected length of one turn, seconds (see ``onceproof.nemesis.catalog.expected_s``)."""
        return 25.0 + HOLD_S + 10.0  # the restart, the held task, the replay's commit

    @staticmethod
    def sink_needs(target: str) -> frozenset[str]:
        """The tasks' hooks (the parked commit and the held init) and Kafka transactions."""
        return frozenset({PRECOMMIT_HOOK, TRANSACTIONS})

    def __init__(self, wait_for_task_s: float = 30.0, hold_s: float = HOLD_S):
        self.wait_for_task_s, self.hold_s = wait_for_task_s, hold_s

    def invoke(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        part = rng.randrange(max(1, len(ctx.sink_ids)))
        target = f"driver (sink partition {part})"
        (ctx.control / hooks.ZOMBIE_RELEASE).unlink(missing_ok=True)
        held = park_task(ctx, part, PARK_MS, self.wait_for_task_s)
        if held is None:
            return Outcome(SKIPPED, target, {"reason": "the run ended first" if ctx.stop.is_set()
                                             else f"no task of sink partition {part} came"})
        ev: dict = {"parked": {k: held.get(k) for k in ("batch", "partition", "attempt", "incarnation", "txn_id")}}
        spec = ctx.control / hooks.ZOMBIE.format(stage="preinit")
        tmp = spec.with_name(spec.name + ".tmp")
        tmp.write_text(json.dumps({"partition": part}))
        tmp.replace(spec)
        pid = ctx.spark.driver_pid
        ev["killed_at"] = time.time()
        gone = pid is not None and ctx.spark.kill_driver(pid)
        ev.update(pid=pid, driver_gone=gone)
        (ctx.control / hooks.PRECOMMIT_HOLD).unlink(missing_ok=True)
        if not gone:
            self.heal(ctx)
            return Outcome(NOT_EFFECTIVE, target, {**ev, "reason": "the driver could not be killed"})
        inc = held.get("incarnation")
        claim = wait_sink_event(ctx, ev["killed_at"], lambda e: e["event"] == "zombie" and e.get("stage") == "preinit"
                           and e.get("partition") == part and e.get("incarnation") != inc, RESTART_WAIT_S)
        if claim is None:
            self.heal(ctx)
            return Outcome(EFFECTIVE, target, {**ev, "reason": "the restarted query's task never came"})
        ev["held"] = {k: claim.get(k) for k in ("batch", "partition", "attempt", "incarnation", "zombie_pid")}
        ev["held_s"] = hold(ctx, self.hold_s)
        fences = [e for e in sink_events(ctx.control.parent, ev["killed_at"])
                  if e.get("incarnation") == claim.get("incarnation")
                  and e["event"] in ("fence-on-start", "fence-on-start-skipped")]
        ev["settled_at_start"] = any(e["event"] == "fence-on-start" and e.get("partition") == part for e in fences)
        released = time.time()
        self._release(ctx, claim.get("zombie_pid"))
        out = wait_sink_event(ctx, released, lambda e: e.get("partition") == part and e["event"] in ("commit", "skip")
                         and e.get("incarnation") == claim.get("incarnation"), 60.0)
        ev["outcome"] = out and {k: out.get(k) for k in ("event", "batch", "marker", "records")}
        exercised = ev["held_s"] >= 0.9 * self.hold_s
        return Outcome(EFFECTIVE, target, ev, exercised=exercised)

    @staticmethod
    def _release(ctx: NemesisContext, pid=None) -> None:
        """Let the held task go on; take its pid off ``zombie.pids`` (it is an ordinary task again, which
        the zombie fault's heal must not kill)."""
        (ctx.control / hooks.ZOMBIE_RELEASE).write_text(str(time.time()))
        p = ctx.control / hooks.ZOMBIE_PIDS
        if pid is not None and p.exists():
            keep = [x for x in p.read_text().split() if x != str(pid)]
            p.write_text("".join(f"{x}\n" for x in keep))

    def heal(self, ctx: NemesisContext) -> None:
        """Withdraw an unclaimed spec and the old task's hold, and release a held task."""
        (ctx.control / hooks.ZOMBIE.format(stage="preinit")).unlink(missing_ok=True)
        (ctx.control / hooks.PRECOMMIT_HOLD).unlink(missing_ok=True)
        if ctx.control.exists():
            self._release(ctx)
