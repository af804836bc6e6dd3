"""``kill-driver-in-commit-window``: SIGKILL the driver after the sink committed batch N and before
Spark wrote ``commits/N`` – the replay window (docs/architecture.md, "The exactly-once sink").

Two ways to find the window, chosen by :attr:`onceproof.nemesis.fault.NemesisContext.commit_window`:

* ``hook`` (the bundled pipeline): deterministic, not hopeful. The nemesis arms the driver's hook
  (``pipeline/hooks.py``), the next batch holds in the window and announces ``{batch, pid}``, and the
  nemesis kills the whole driver process group there.
* ``watch`` (a ``--pipeline-cmd`` pipeline, no hook in the user's code; the file sink, which is not
  ``foreachBatch``): the nemesis polls the checkpoint's ``offsets/`` and ``commits/`` and the output's
  committed end (the sink entry's ``CommittedEnd``: the output topic's LSOs; the batches in a file sink's
  ``_spark_metadata``; a table's committed rows) at the interval it allows
  (:class:`onceproof.nemesis.commit_window_watch.CommitWindowWatch`), and when batch N's output is
  visible while ``commits/N`` is absent it freezes the driver's process group (SIGSTOP), looks again,
  and kills it if ``commits/N`` is still absent. A batch that closed its window before the freeze is
  thawed and let go (``windows_missed``); the next one is watched.

Evidence: the batch, the driver pid, ``offsets/N`` present and ``commits/N`` absent both at the kill and
after the driver is gone (so Spark must replay N), and (watch) the output offsets that grew.
"""

from __future__ import annotations

import json
import random
import time

from onceproof.nemesis.commit_window_watch import CommitWindowWatch
from onceproof.nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, SKIPPED, NemesisContext, Outcome
from onceproof.pipeline import hooks
from onceproof.store import checkpoint


class KillDriverInCommitWindow:
    name = "kill-driver-in-commit-window"

    @staticmethod
    def expected_s(target: str, hold_s: float, txn_timeout_ms: int) -> float:
        """Expected length of one turn, seconds (see ``onceproof.nemesis.catalog.expected_s``)."""
        return 25.0  # the next batch reaching the window, then a driver restart

    def __init__(self, window_timeout_s: float = 90.0, poll_s: float = 0.05, output_ends=None):
        """``poll_s``: the longest poll interval, s (the output's own ``CommittedEnd.poll_s`` when
        shorter). ``output_ends(bootstrap, topic)`` builds what the watch reads the output's committed end
        with (an object whose ``read()`` returns ``{partition: end}``); default: the run's sink entry's
        (``NemesisContext.committed_end``, ``onceproof.sinks.base.CommittedEnd``)."""
        self.window_timeout_s = window_timeout_s
        self.poll_s = poll_s
        self.output_ends = output_ends

    def invoke(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        if ctx.commit_window == "watch":
            return self._watched(ctx)
        return self._hooked(ctx)

    def _hooked(self, ctx: NemesisContext) -> Outcome:
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
        ev = {"mode": "hook", "batch": batch, "pid": pid,
              "offsets_logged": checkpoint.has_offsets(ctx.checkpoint, batch),
              "commit_logged_at_kill": checkpoint.has_commit(ctx.checkpoint, batch)}
        ev["driver_gone"] = ctx.spark.kill_driver(pid)
        ev["commit_logged_after_kill"] = checkpoint.has_commit(ctx.checkpoint, batch)
        (ctx.control / hooks.OPEN).unlink(missing_ok=True)
        ok = ev["offsets_logged"] and not ev["commit_logged_after_kill"] and ev["driver_gone"]
        return Outcome(EFFECTIVE if ok else NOT_EFFECTIVE, f"driver (batch {batch})", ev)

    def _watched(self, ctx: NemesisContext) -> Outcome:
        """The hook-free way: poll, and kill when :class:`CommitWindowWatch` sees the window open."""
        if self.output_ends is not None:
            ends = self.output_ends(ctx.cluster.bootstrap if ctx.cluster else "", ctx.output_topic)
        elif ctx.committed_end is not None:
            ends = ctx.committed_end()
        else:
            return Outcome(NOT_EFFECTIVE, "driver", {"mode": "watch", "reason": "no committed end of the output "
                                                                                "to watch (a harness bug)"})
        try:
            return self._watch(ctx, ends, min(self.poll_s, getattr(ends, "poll_s", self.poll_s)))
        finally:
            close = getattr(ends, "close", None)
            if close is not None:
                close()

    def _watch(self, ctx: NemesisContext, ends, poll_s: float) -> Outcome:
        settle_s = float(getattr(ends, "settle_s", 0.0))
        watch = CommitWindowWatch(settle_s=settle_s)
        misses, absorbed = 0, 0
        deadline = time.monotonic() + self.window_timeout_s
        polls, errors = 0, 0
        while time.monotonic() < deadline and not ctx.stop.is_set():
            pid = ctx.spark.driver_pid
            off, com = checkpoint.latest_offset_batch(ctx.checkpoint), checkpoint.latest_commit(ctx.checkpoint)
            try:
                out = ends.read()
            except Exception:  # noqa: BLE001 - a broker fault may be under way: poll again
                errors += 1
                time.sleep(poll_s)
                continue
            polls += 1
            batch = watch.observe(off, com, out, time.monotonic())
            if batch is not None and pid is not None:
                # freeze the driver (its whole process group), then look again: a commits/N written
                # between the poll and the freeze means the window closed; thaw and watch the next batch
                frozen = ctx.spark.freeze_driver(pid)
                if checkpoint.has_commit(ctx.checkpoint, batch):
                    if frozen:
                        ctx.spark.thaw_driver(pid)
                    misses += 1
                    absorbed += watch.absorbed
                    watch = CommitWindowWatch(settle_s=settle_s)
                    continue
                ev = {"mode": "watch", "batch": batch, "pid": pid, "frozen": frozen, "windows_missed": misses,
                      "settle_s": settle_s, "settled_polls": absorbed + watch.absorbed,
                      "offsets_logged": checkpoint.has_offsets(ctx.checkpoint, batch),
                      "commit_logged_at_kill": False,
                      "output_end_at_offsets_logged": {str(p): o for p, o in sorted(watch.baseline.items())},
                      "output_end_at_kill": {str(p): o for p, o in sorted(out.items())}}
                ev["driver_gone"] = ctx.spark.kill_driver(pid)
                ev["commit_logged_after_kill"] = checkpoint.has_commit(ctx.checkpoint, batch)
                ev["polls"] = polls
                ok = ev["offsets_logged"] and not ev["commit_logged_after_kill"] and ev["driver_gone"]
                return Outcome(EFFECTIVE if ok else NOT_EFFECTIVE, f"driver (batch {batch})", ev)
            time.sleep(poll_s)
        reason = {"polls": polls, "poll_errors": errors, "mode": "watch", "windows_missed": misses,
                  "settle_s": settle_s, "settled_polls": absorbed + watch.absorbed}
        if ctx.stop.is_set():
            return Outcome(SKIPPED, "driver", {**reason, "reason": "the run ended before a batch reached the window"})
        return Outcome(NOT_EFFECTIVE, "driver",
                       {**reason, "reason": f"no batch's output was seen before its commits/N in "
                                            f"{self.window_timeout_s}s (polling every {poll_s}s)"})

    def heal(self, ctx: NemesisContext) -> None:
        """Disarm the hook so no later batch waits in the window."""
        (ctx.control / hooks.ARMED).unlink(missing_ok=True)
