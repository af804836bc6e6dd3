"""``kill-driver``: SIGKILL the driver's whole process group at a random moment (the supervisor restarts
it from the checkpoint). Evidence: pid, ``killed_at`` (epoch s), the batch Spark had logged in
``offsets/`` but not yet in ``commits/`` at the kill (an in-flight batch that must be replayed), and that
the pid is gone."""

from __future__ import annotations

import random
import time

from onceproof.nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, SKIPPED, NemesisContext, Outcome
from onceproof.store import checkpoint


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
        off, com = checkpoint.latest_offset_batch(ctx.checkpoint), checkpoint.latest_commit(ctx.checkpoint)
        killed_at = time.time()
        gone = ctx.spark.kill_driver(pid)
        ev = {"pid": pid, "killed_at": killed_at, "latest_offsets": off, "latest_commit": com,
              "in_flight_batch": off if off is not None and off != com else None,
              "driver_gone": gone}
        return Outcome(EFFECTIVE if ev["driver_gone"] else NOT_EFFECTIVE, "driver", ev)

    def heal(self, ctx: NemesisContext) -> None:
        """Nothing to undo: the supervisor restarts the driver."""
