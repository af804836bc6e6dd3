"""``kill-driver-in-commit-window``: SIGKILL the driver after the sink committed batch N and before
Spark wrote ``commits/N`` – the replay window (DESIGN §2).

Deterministic, not hopeful: the nemesis arms the driver's hook (``pipeline/hooks.py``), the next batch
holds in the window and announces ``{batch, pid}``, and the nemesis kills the whole driver process group
there. Evidence: the batch, the driver pid, ``offsets/N`` present and ``commits/N`` absent both at the
kill and after the driver is gone (so Spark must replay N), and the sink's own commits of batch N.
"""

from __future__ import annotations

import json
import random
import time

from store import checkpoint
from nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, SKIPPED, NemesisContext, Outcome
from pipeline import hooks, sinks


class KillDriverInCommitWindow:
    name = "kill-driver-in-commit-window"

    @staticmethod
    def expected_s(target: str, hold_s: float, txn_timeout_ms: int) -> float:
        """Expected length of one turn, seconds (see ``nemesis.catalog.expected_s``)."""
        return 25.0  # the next batch reaching the window, then a driver restart

    @staticmethod
    def sink_needs(target: str) -> frozenset[str]:
        """Sink capabilities (``pipeline/sinks.py``) needed: the driver's after-commit hook."""
        return frozenset({sinks.DRIVER_HOOKS})

    def __init__(self, window_timeout_s: float = 90.0):
        self.window_timeout_s = window_timeout_s

    def invoke(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        for stale in (hooks.OPEN, hooks.MISSED):
            (ctx.control / stale).unlink(missing_ok=True)
        (ctx.control / hooks.ARMED).write_text(json.dumps({"time": time.time()}))
        deadline = time.monotonic() + self.window_timeout_s
        info = None
        while time.monotonic() < deadline and not ctx.stop.is_set():
            try:
                info = json.loads((ctx.control / hooks.OPEN).read_text())
                break
            except (FileNotFoundError, ValueError):
                time.sleep(0.05)
        if info is None:
            self.heal(ctx)
            if ctx.stop.is_set():
                return Outcome(SKIPPED, "driver", {"reason": "the run ended before a batch reached the window"})
            return Outcome(NOT_EFFECTIVE, "driver",
                           {"reason": f"no batch reached the commit window in {self.window_timeout_s}s"})
        batch, pid = int(info["batch"]), int(info["pid"])
        ev = {"batch": batch, "pid": pid,
              "offsets_logged": checkpoint.has_offsets(ctx.checkpoint, batch),
              "commit_logged_at_kill": checkpoint.has_commit(ctx.checkpoint, batch)}
        ev["driver_gone"] = ctx.spark.kill_driver(pid)
        ev["commit_logged_after_kill"] = checkpoint.has_commit(ctx.checkpoint, batch)
        (ctx.control / hooks.OPEN).unlink(missing_ok=True)
        ok = ev["offsets_logged"] and not ev["commit_logged_after_kill"] and ev["driver_gone"]
        return Outcome(EFFECTIVE if ok else NOT_EFFECTIVE, f"driver (batch {batch})", ev)

    def heal(self, ctx: NemesisContext) -> None:
        """Disarm the hook so no later batch waits in the window."""
        (ctx.control / hooks.ARMED).unlink(missing_ok=True)
