"""``kill-driver-in-commit-window``: SIGKILL the driver after the sink committed batch N and before
Spark wrote ``commits/N`` – the replay window (docs/architecture.md, "The exactly-once sink").

Two ways to find the window, chosen by :attr:`onceproof.nemesis.fault.NemesisContext.commit_window`:

* ``hook`` (the bundled pipeline): deterministic, not hopeful. The nemesis arms the driver's hook
  (``pipeline/hooks.py``), the next batch holds in the window and announces ``{batch, pid}``, and the
  nemesis kills the whole driver process group there.
* ``watch`` (a ``--pipeline-cmd`` pipeline, no hook in the user's code; the file sink, which is not
  ``foreachBatch``): the nemesis polls the checkpoint's ``offsets/`` and ``commits/`` and the output's
  committed end (the output topic's LSOs; for the file sink, the batches in ``_spark_metadata``) every
  ``poll_s`` s (:class:`onceproof.nemesis.commit_window_watch.CommitWindowWatch`, a tenth of that for a file
  sink), and when batch N's output is visible while ``commits/N`` is absent it freezes the driver's
  process group (SIGSTOP), looks again, and kills it if ``commits/N`` is still absent. A batch that
  closed its window before the freeze is thawed and let go (``windows_missed``); the next one is
  watched.

Evidence: the batch, the driver pid, ``offsets/N`` present and ``commits/N`` absent both at the kill and
after the driver is gone (so Spark must replay N), and (watch) the output offsets that grew.
"""

from __future__ import annotations

import json
import random
import time

from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import OffsetSpec

from onceproof.clients import topics
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
        """``output_ends(bootstrap, topic)`` builds what the watch reads the output's LSOs with (an object
        whose ``read()`` returns ``{partition: offset}``); default :class:`_OutputEnds`."""
        self.window_timeout_s = window_timeout_s
        self.poll_s = poll_s
        self.output_ends = output_ends or _OutputEnds

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
        ends = (_FileSinkEnds(ctx.file_sink) if ctx.file_sink is not None
                else self.output_ends(ctx.cluster.bootstrap, ctx.output_topic))
        poll_s = self.poll_s / 10 if ctx.file_sink is not None else self.poll_s  # a directory listing is cheap
        watch = CommitWindowWatch()
        misses = 0
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
            batch = watch.observe(off, com, out)
            if batch is not None and pid is not None:
                # freeze the driver (its whole process group), then look again: a commits/N written
                # between the poll and the freeze means the window closed; thaw and watch the next batch
                frozen = ctx.spark.freeze_driver(pid)
                if checkpoint.has_commit(ctx.checkpoint, batch):
                    if frozen:
                        ctx.spark.thaw_driver(pid)
                    misses += 1
                    watch = CommitWindowWatch()
                    continue
                ev = {"mode": "watch", "batch": batch, "pid": pid, "frozen": frozen, "windows_missed": misses,
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
        reason = {"polls": polls, "poll_errors": errors, "mode": "watch", "windows_missed": misses}
        if ctx.stop.is_set():
            return Outcome(SKIPPED, "driver", {**reason, "reason": "the run ended before a batch reached the window"})
        return Outcome(NOT_EFFECTIVE, "driver",
                       {**reason, "reason": f"no batch's output was seen before its commits/N in "
                                            f"{self.window_timeout_s}s (polling every {poll_s}s)"})

    def heal(self, ctx: NemesisContext) -> None:
        """Disarm the hook so no later batch waits in the window."""
        (ctx.control / hooks.ARMED).unlink(missing_ok=True)


class _FileSinkEnds:
    """A file sink's committed output, as the watch's "end offsets": ``{0: batches in _spark_metadata}``
    (the highest ``N`` or ``N.compact`` there, plus one; 0 for none). It grows when the driver commits
    batch N to the sink's log, just before Spark's ``commits/N`` (``pipeline/file_sink.py``)."""

    def __init__(self, path):
        self.path = path

    def read(self) -> dict[int, int]:
        # lazy: sinks.file_log loads pandas, which a run without a file sink need not load here
        from onceproof.sinks.file_log import latest_batch

        last = latest_batch(self.path)
        return {0: 0 if last is None else last + 1}


class _OutputEnds:
    """The output topic's end offsets at read_committed (the LSO, KIP-98), polled through one
    AdminClient (``ListOffsets`` with ``READ_COMMITTED``; ``onceproof.clients.topics.end_offsets`` builds a client
    per call, too slow for a 50 ms poll)."""

    def __init__(self, bootstrap: str, topic: str):

        self.topic = topics.partitions(bootstrap, topic)
        self.name = topic
        self.admin = topics.admin(bootstrap)

    def read(self) -> dict[int, int]:
        """``{partition: LSO}``. Raises ``confluent_kafka.KafkaException`` when a partition has none now."""

        req = {TopicPartition(self.name, p): OffsetSpec.latest() for p in self.topic}
        futs = self.admin.list_offsets(req, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=5)
        return {tp.partition: f.result(timeout=10).offset for tp, f in futs.items()}
