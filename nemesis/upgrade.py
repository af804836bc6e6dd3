"""``upgrade``: stop the driver in the middle of a batch and restart it from the same checkpoint with a
changed configuration (Kafka's ``transactions_upgrade_test.py`` and Kafka Streams' EOS upgrade tests are
the anchors: a release is only safe if a running query survives being restarted into it).

Deterministic, not hopeful: the restart must land on a *partially committed* batch, or it tests only
what ``kill-driver`` already does. The nemesis parks the next sink task of one seeded sink partition in
the pre-commit hook (``pipeline/hooks.py``, as ``kill-executor`` does), waits until the batch's other
sink partitions have committed, writes the new options to ``<control>/driver-overrides.json``
(``pipeline.job`` reads it at start) and SIGKILLs the driver's process group. The supervisor restarts
it; Spark replays the batch from its offset log under the new options.

Targets (each turn toggles the option: set, then back to the command line's value):

* ``min-partitions`` – the Kafka source's ``minPartitions`` = 2 × the input partitions, so the replay
  splits every input partition's range in two. A sink whose marker and ``transactional.id`` are keyed
  by Spark's partition index (``eos-index-keyed``, the sink before issue 10's fix) then skips rows it
  never committed and rewrites rows it did.
* ``max-offsets`` – ``maxOffsetsPerTrigger`` halved (a control: a replayed batch keeps its planned
  offsets, which the offset log fixes, so only later batches change).

Evidence: the held (batch, sink partition), the sink partitions of that batch committed before the
kill, the options written, the restarted driver's options (``driver.ready``) and what the new driver's
tasks did with the replayed batch (per sink partition: ``skip`` / ``commit``). ``exercised``: the batch
was partially committed at the kill and the restarted driver, running the new options, replayed it.
"""

from __future__ import annotations

import json
import random
import time

from nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, SKIPPED, NemesisContext, Outcome, sink_events
from pipeline import hooks, sinks

TARGETS = ("min-partitions", "max-offsets")


class Upgrade:
    name = "upgrade"
    target_choices = TARGETS

    @staticmethod
    def expected_s(target: str, hold_s: float, txn_timeout_ms: int) -> float:
        """Expected length of one turn, seconds (see ``nemesis.catalog.expected_s``)."""
        return 40.0  # a held task, the other partitions' commits, a driver restart (~25 s), the replay

    @staticmethod
    def sink_needs(target: str) -> frozenset[str]:
        """The sink's pre-commit hook parks a task so the kill lands on a partially committed batch."""
        return frozenset({sinks.PRECOMMIT_HOOK})

    def __init__(self, target: str | None = None, partitions: int = 6, max_offsets: int = 5000,
                 wait_for_task_s: float = 30.0, restart_wait_s: float = 150.0):
        if target is not None and target not in TARGETS:
            raise ValueError(f"unknown upgrade target {target!r}; choose from {', '.join(TARGETS)}")
        self.target, self.partitions, self.max_offsets = target, partitions, max_offsets
        self.wait_for_task_s, self.restart_wait_s = wait_for_task_s, restart_wait_s

    def _overrides(self, ctx: NemesisContext, target: str) -> dict:
        cur = hooks.driver_overrides(ctx.control)
        key, value = (("min_partitions", 2 * self.partitions) if target == "min-partitions"
                      else ("max_offsets", max(1, self.max_offsets // 2)))
        if key in cur:
            cur.pop(key)
        else:
            cur[key] = value
        return cur

    def invoke(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        target = self.target or rng.choice(list(TARGETS))
        pool = max(1, len(ctx.sink_ids))
        part = rng.randrange(pool)
        pid = ctx.spark.driver_pid
        if pid is None:
            return Outcome(SKIPPED, target, {"reason": "no driver running"})
        t0 = time.time()
        tmp = ctx.control / (hooks.PRECOMMIT_HOLD + ".tmp")
        tmp.write_text(json.dumps({"ms": 60000, "partition": part}))
        tmp.replace(ctx.control / hooks.PRECOMMIT_HOLD)
        held = None
        deadline = time.monotonic() + self.wait_for_task_s
        while held is None and time.monotonic() < deadline and not ctx.stop.wait(0.1):
            held = next((e for e in sink_events(ctx.control.parent, t0)
                         if e["event"] == "hold" and e.get("partition") == part), None)
        if held is None:
            (ctx.control / hooks.PRECOMMIT_HOLD).unlink(missing_ok=True)
            return Outcome(SKIPPED, target, {"reason": f"no task of sink partition {part} reached the hook"})
        batch = held["batch"]
        # the batch's other partitions commit while this one is held (≤ 20 s; done when 2 s pass quietly)
        committed: set[int] = set()
        quiet_since, deadline = time.monotonic(), time.monotonic() + 20
        while time.monotonic() < deadline and not ctx.stop.is_set():
            now = {e["partition"] for e in sink_events(ctx.control.parent, held["time"] - 30)
                   if e["event"] in ("commit", "skip") and e.get("batch") == batch and e.get("partition") != part
                   and e.get("incarnation") == held.get("incarnation")}
            if now != committed:
                committed, quiet_since = now, time.monotonic()
            if len(committed) >= pool - 1 or time.monotonic() - quiet_since > 2.0:
                break
            time.sleep(0.2)
        overrides = self._overrides(ctx, target)
        tmp = ctx.control / (hooks.DRIVER_OVERRIDES + ".tmp")
        tmp.write_text(json.dumps(overrides))
        tmp.replace(ctx.control / hooks.DRIVER_OVERRIDES)
        killed_at = time.time()
        gone = ctx.spark.kill_driver(pid)
        (ctx.control / hooks.PRECOMMIT_HOLD).unlink(missing_ok=True)
        ev = {"held": {k: held.get(k) for k in ("batch", "partition", "attempt", "incarnation")},
              "committed_before_kill": sorted(committed), "overrides": overrides, "driver_pid": pid,
              "driver_gone": gone}
        if not gone:
            return Outcome(NOT_EFFECTIVE, target, {**ev, "reason": "the driver survived SIGKILL"})
        replay: dict[int, str] = {}
        ready = None
        deadline = time.monotonic() + self.restart_wait_s
        while time.monotonic() < deadline and not ctx.stop.wait(0.5):
            events = sink_events(ctx.control.parent, killed_at)  # one read of sink.jsonl per poll
            for e in events:
                if e.get("batch") == batch and e["event"] in ("commit", "skip") \
                        and e.get("incarnation") != held.get("incarnation"):
                    replay.setdefault(e["partition"], e["event"])
            if replay and ready is None:
                try:
                    ready = json.loads((ctx.control / hooks.READY).read_text())
                except (FileNotFoundError, ValueError):
                    ready = None
            # every sink partition of the replay done, or the pipeline moved on past it
            if len(replay) >= pool or any(e["event"] == "commit" and e.get("batch", -1) > batch for e in events):
                break
        ev["replay"] = {str(k): v for k, v in sorted(replay.items())}
        ev["restarted_with"] = ready and {k: ready.get(k) for k in ("incarnation", "min_partitions", "max_offsets")}
        applied = ready is not None and all(ready.get(k) == v for k, v in overrides.items())
        exercised = bool(committed) and bool(replay) and applied
        return Outcome(EFFECTIVE, f"{target} (batch {batch} partly committed: {len(committed)}/{pool})", ev,
                       exercised=exercised)

    def heal(self, ctx: NemesisContext) -> None:
        """Withdraw an unclaimed hold. The changed options stay: the restarted query runs on them, as an
        upgraded one would (a later turn of the same target toggles them back)."""
        (ctx.control / hooks.PRECOMMIT_HOLD).unlink(missing_ok=True)
