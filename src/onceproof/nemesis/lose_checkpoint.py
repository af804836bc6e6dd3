"""``lose-checkpoint``: the query's checkpoint directory is lost while its driver is down, as an operator's
mistake (a redeploy to a fresh path, a ``rm -rf`` of "temporary" files) or a storage loss would lose it.

One turn kills the driver's process group, moves its checkpoint aside (``CheckpointLoss``, ``backends/base.py``)
and lets the supervisor start it again: the query starts anew from its source's ``startingOffsets``
(Spark's Structured Streaming Programming Guide, "Recovering from Failures with Checkpointing": the
checkpoint is where a query's progress lives), its batch ids counting from 0 again. With ``earliest`` it
reads the input again from the start: a sink without idempotence writes it again (``duplicate``), and a
sink that skips the batch ids it already committed (a marker or progress row keyed by batch id, as the
bundled one's) skips new batches that hold data never written (``lost``). With ``latest`` it skips what
arrived while it was down: ``lost``.

Evidence: the checkpoint's newest ``offsets/N`` and ``commits/N`` batch ids before the loss, where it was
moved, and the new checkpoint's first batch ids after the restart. Effective when the directory moved;
exercised when the restarted query wrote a new checkpoint (its ``offsets/0``) within :data:`FOLLOW_S`.
Nothing to heal: the lost checkpoint stays aside (the report can read it).
"""

from __future__ import annotations

import random
import time

from onceproof.nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, SKIPPED, NemesisContext, Outcome
from onceproof.store import checkpoint

FOLLOW_S = 150.0
"""How long the turn waits for the restarted query's new checkpoint, s (a driver start is ~20-60 s on 2 cores;
a fresh clone's make test once saw more than 90 s, behind a stalled warm-up read)."""


class LoseCheckpoint:
    """Kill the driver, move the query's checkpoint aside and let the supervisor start it anew from its
    startingOffsets, as an operator's mistake or a storage loss would. Evidence and outcomes: the module
    docstring."""

    name = "lose-checkpoint"

    @staticmethod
    def expected_s(target: str, hold_s: float, txn_timeout_ms: int) -> float:
        """Expected length of one turn, seconds: a driver restart and its first batch."""
        return 40.0

    def invoke(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        pid = ctx.spark.driver_pid
        if pid is None:
            return Outcome(SKIPPED, "checkpoint", {"reason": "no driver running"})
        before = {"offsets": checkpoint.latest_offset_batch(ctx.checkpoint),
                  "commits": checkpoint.latest_commit(ctx.checkpoint)}
        if before["offsets"] is None:
            return Outcome(SKIPPED, "checkpoint", {"reason": "the query has planned no batch yet"})
        ev: dict = {"pid": pid, "before": before}
        ev["driver_gone"] = ctx.spark.kill_driver(pid)
        try:
            ev["moved_to"] = ctx.spark.lose_checkpoint()
        except OSError as e:
            ev["error"] = str(e)[:300]
            return Outcome(NOT_EFFECTIVE, "checkpoint", ev)
        t0 = time.monotonic()
        after = None
        while time.monotonic() - t0 < FOLLOW_S and not ctx.stop.is_set():
            after = checkpoint.latest_offset_batch(ctx.checkpoint)
            if after is not None:
                break
            ctx.stop.wait(1.0)
        ev["after"] = {"offsets": after, "commits": checkpoint.latest_commit(ctx.checkpoint),
                       "after_s": round(time.monotonic() - t0, 1)}
        return Outcome(EFFECTIVE, "checkpoint", ev, exercised=after is not None)

    def heal(self, ctx: NemesisContext) -> None:
        """Nothing: the lost checkpoint stays aside."""
