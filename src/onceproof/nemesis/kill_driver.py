"""``kill-driver``: SIGKILL the driver's whole process group (the supervisor restarts it from the
checkpoint), aimed at a micro-batch in flight: the kill waits (at most :data:`AIM_S`) until Spark has
logged ``offsets/N`` but not yet ``commits/N``, so the restarted query must replay batch N rather than
only resume between batches. A pipeline that has logged no batch yet is killed at once. The aim needs no
hook, so it holds for a user's ``--pipeline-cmd`` job too. Evidence: pid, ``killed_at`` (epoch s), the
in-flight batch at the kill (``None`` when the aim ran out), the wait, and that the pid is gone."""

from __future__ import annotations

import random
import time

from onceproof.nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, SKIPPED, NemesisContext, Outcome
from onceproof.store import checkpoint

AIM_S = 20.0
"""Seconds a kill waits for a micro-batch in flight before it kills between batches anyway."""
AIM_POLL_S = 0.05


def _batch_in_flight(ctx: NemesisContext, deadline: float) -> tuple[int | None, int | None]:
    """``(latest offsets/N, latest commits/N)`` once they differ (a batch in flight), or as they are at
    ``deadline`` (monotonic s), at a stop, or at once when no batch was logged yet."""
    while True:
        off, com = checkpoint.latest_offset_batch(ctx.checkpoint), checkpoint.latest_commit(ctx.checkpoint)
        if off is None or off != com or time.monotonic() >= deadline or ctx.stop.is_set():
            return off, com
        time.sleep(AIM_POLL_S)


class KillDriver:
    name = "kill-driver"

    @staticmethod
    def expected_s(target: str, hold_s: float, txn_timeout_ms: int) -> float:
        """Expected length of one turn, seconds (see ``onceproof.nemesis.catalog.expected_s``)."""
        return 25.0  # the supervisor's driver restart, ~20 s on 2 cores

    def __init__(self, wait_for_target_s: float = 60.0):
        self.wait_for_target_s = wait_for_target_s

    def invoke(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        deadline = time.monotonic() + self.wait_for_target_s
        pid = ctx.spark.driver_pid
        while pid is None and time.monotonic() < deadline and not ctx.stop.is_set():
            time.sleep(0.5)
            pid = ctx.spark.driver_pid
        if pid is None:
            return Outcome(SKIPPED, "driver", {"reason": "no driver running"})
        t_aim = time.monotonic()
        off, com = _batch_in_flight(ctx, t_aim + AIM_S)
        killed_at = time.time()
        gone = ctx.spark.kill_driver(pid)
        ev = {"pid": pid, "killed_at": killed_at, "latest_offsets": off, "latest_commit": com,
              "aim": "a micro-batch in flight (offsets/N logged, commits/N not)",
              "aim_waited_s": round(time.monotonic() - t_aim, 3),
              "in_flight_batch": off if off is not None and off != com else None,
              "driver_gone": gone}
        return Outcome(EFFECTIVE if ev["driver_gone"] else NOT_EFFECTIVE, "driver", ev)

    def heal(self, ctx: NemesisContext) -> None:
        """Nothing to undo: the supervisor restarts the driver."""
