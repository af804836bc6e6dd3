"""``upgrade``: stop the driver in the middle of a batch and restart it from the same checkpoint with a
changed configuration, a graceful stop, or another PySpark (Kafka's ``transactions_upgrade_test.py`` and
Kafka Streams' EOS upgrade tests are the anchors: a release is only safe if a running query survives
being restarted into it).

Deterministic, not hopeful: the restart must land on a *partially committed* batch, or it tests only
what ``kill-driver`` already does. The nemesis parks the next sink task of one seeded sink partition in
the pre-commit hook (``pipeline/hooks.py``, as ``kill-executor`` does) and waits until the batch's other
sink partitions have committed. Then it stops the driver — SIGKILL of its process group, or
``query.stop()`` for ``graceful`` — and the supervisor restarts it; Spark replays the batch from its
offset log.

Targets:

* ``min-partitions`` – the Kafka source's ``minPartitions`` = 2 × the input partitions (written to
  ``<control>/driver-overrides.json``, which ``onceproof.job`` reads at start), so the replay splits every
  input partition's range in two. A sink whose marker and ``transactional.id`` are keyed by Spark's
  partition index (``eos-index-keyed``, the sink before issue 10's fix) then skips rows it never
  committed and rewrites rows it did. Each turn toggles the option: set, then back to the command
  line's value.
* ``max-offsets`` – ``maxOffsetsPerTrigger`` halved, toggled the same way (a control: a replayed batch
  keeps its planned offsets, which the offset log fixes, so only later batches change).
* ``graceful`` – the driver is stopped with ``query.stop()`` instead of a kill: the nemesis writes
  ``<control>/driver-stop.json`` naming the running driver incarnation (``driver.ready``); the driver's
  ``onceproof.job.await_query`` sees it within a second, writes ``driver-stopped.json`` (``stopping``),
  calls ``query.stop()`` — Spark cancels the running batch's jobs and waits for its micro-batch thread
  (``spark.sql.streaming.stopTimeout`` = 60 s) — writes ``driver-stopped.json`` (``stopped``) and
  exits 0; the supervisor restarts it. The parked task is released as soon as the driver acknowledges
  the request (or after :data:`ACK_S` s), so the stop lands while the batch is in flight. No
  ``stopped`` within ``graceful_wait_s`` (75 s), ``stop()`` raising, or a driver process still alive
  :data:`EXIT_WAIT_S` (30 s) after ``stopped``: the driver is SIGKILLed instead and the turn is not
  exercised (what happens to a ``--pipeline-cmd`` pipeline, which has no such hook).
* ``pyspark`` – the restarted driver runs the previous PySpark minor (``SparkApp.set_runtime``: the
  local backend builds and caches it, ``backends/local/runtimes.py``), then the harness's own again on
  the next turn; the driver is SIGKILLed as for ``min-partitions``. If the restarted driver does not
  become ready and commit (or skip) within ``restart_wait_s``, the own runtime is restored (and a driver
  still on the previous one is killed so that it restarts on it), and the turn is not exercised: a
  checkpoint written by one version that the other cannot read is a finding, and the evidence says so.

* ``spark-version`` – the restarted driver runs the next Spark line after the one the run is on (its
  ``--spark-version``: 3.5 → 4.0, 4.1 → 4.2), that line's release as ``--spark-version`` would choose it
  (``backends/common/spark_release.next_release``), the way a user moves a job: stop it, restart it from its
  checkpoint on the new Spark (Spark keeps checkpoints readable by later releases; SPARK-22294 and the
  migration guides, spark.apache.org/docs/latest/streaming/ss-migration-guide.html). One way: each turn moves
  one line up and stays there. Never drawn by a bare ``upgrade`` or ``all`` (a run on onceproof's own,
  newest line has no next one): name it. A restarted driver that does not become ready and commit within
  ``restart_wait_s`` is rolled back to the line it came from, and the turn's evidence carries Spark's error
  from that driver's log (``spark_error``): a checkpoint the new release refuses is a finding, not a crash.

Evidence: the held (batch, sink partition), the sink partitions of that batch committed before the
kill or stop, the options or runtime the restart was given, the restarted driver's ``driver.ready``
(``restarted_with``: incarnation, options, ``pyspark`` = Spark's version), and what the new driver's
tasks did with the replayed batch (per sink partition: ``skip`` / ``commit``); ``graceful_stop`` for
``graceful`` (``driver-stopped.json`` and the seconds from request to stopped). ``exercised``: for the
kill targets, the batch was partially committed at the kill and the restarted driver, running the new
options or PySpark, replayed it; for ``graceful``, the driver stopped through ``query.stop()`` and a new
incarnation became ready and committed or skipped a batch.
"""

from __future__ import annotations

import random
import re
import time

from onceproof.backends.base import BackendError
from onceproof.backends.common import spark_release
from onceproof.nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, SKIPPED, NemesisContext, Outcome, park_task, sink_events
from onceproof.pipeline import hooks
from onceproof.sinks.base import PRECOMMIT_HOOK

TARGETS = ("min-partitions", "max-offsets", "graceful", "pyspark")
NAMED_TARGETS = ("spark-version",)  # accepted when named, never drawn (module docstring)
RUNTIME_TARGETS = ("pyspark", "spark-version")  # the restarted driver runs another PySpark
OPTIONS = {"min-partitions": "min_partitions", "max-offsets": "max_offsets"}  # target → driver.ready key
EXIT_WAIT_S = 30.0  # for the driver process to exit after its query stopped
ACK_S = 10.0  # how long a graceful stop request waits for the driver's "stopping" before the task goes on
FIRST_BUILD_S = 40.0  # the previous PySpark's environment, built on the first pyspark turn (38 s measured)
EXPECTED_S = {"min-partitions": 40.0, "max-offsets": 40.0, "graceful": 60.0, "pyspark": 60.0 + FIRST_BUILD_S,
              "spark-version": 60.0 + FIRST_BUILD_S}


def _same(a, b) -> bool:
    """Incarnations compare as strings (``sink.jsonl`` and ``driver.ready`` both write ``"3"``)."""
    return a is not None and b is not None and str(a) == str(b)


class Upgrade:
    """The ``upgrade`` fault (module docstring): one turn parks a task, stops the driver mid-batch and
    checks the restarted incarnation; ``target`` fixes the target, ``None`` draws one per turn."""

    name = "upgrade"
    target_choices = TARGETS
    named_targets = NAMED_TARGETS

    @staticmethod
    def expected_s(target: str, hold_s: float, txn_timeout_ms: int) -> float:
        """Expected length of one turn, seconds (see ``onceproof.nemesis.catalog.expected_s``): a held task, the
        other partitions' commits, a driver restart (~25 s) and the replay, ~40 s; ``graceful`` adds
        ``query.stop()`` waiting for the cancelled batch (~60 s); ``pyspark`` a JVM of another Spark
        and, on its first turn, building that PySpark's environment (:data:`FIRST_BUILD_S`). Without a
        target, the longest."""
        return EXPECTED_S.get(target, max(EXPECTED_S.values()))

    @staticmethod
    def sink_needs(target: str) -> frozenset[str]:
        """The sink's pre-commit hook parks a task so the kill lands on a partially committed batch."""
        return frozenset({PRECOMMIT_HOOK})

    def __init__(self, target: str | None = None, partitions: int = 6, max_offsets: int = 5000,
                 wait_for_task_s: float = 30.0, restart_wait_s: float = 150.0, graceful_wait_s: float = 75.0):
        """``partitions``: the input topic's (``min-partitions`` doubles it); ``max_offsets``: the command
        line's ``maxOffsetsPerTrigger`` (``max-offsets`` halves it); ``wait_for_task_s``: for a task to
        claim the hold; ``restart_wait_s``: for the restarted driver to replay; ``graceful_wait_s``: for
        ``driver-stopped.json`` after a stop request. Seconds.

        Raises: ``ValueError`` for an unknown target."""
        if target is not None and target not in TARGETS + NAMED_TARGETS:
            raise ValueError(f"unknown upgrade target {target!r}; choose from {', '.join(TARGETS + NAMED_TARGETS)}")
        self.target, self.partitions, self.max_offsets = target, partitions, max_offsets
        self.wait_for_task_s, self.restart_wait_s = wait_for_task_s, restart_wait_s
        self.graceful_wait_s = graceful_wait_s
        self.previous_runtime = False  # the pyspark target's toggle: the next driver start runs the previous PySpark
        self.upgraded: str | None = None  # the release spark-version turns moved the query to (None: the run's own)

    def _overrides(self, ctx: NemesisContext, target: str) -> dict:
        cur = hooks.driver_overrides(ctx.control)
        key = OPTIONS[target]
        if key in cur:
            cur.pop(key)
        else:
            cur[key] = 2 * self.partitions if target == "min-partitions" else max(1, self.max_offsets // 2)
        return cur

    def invoke(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        target = self.target or rng.choice(list(TARGETS))
        pool = max(1, len(ctx.sink_ids))
        part = rng.randrange(pool)
        runtime = None
        if target in RUNTIME_TARGETS:  # first: building the environment can take a minute, before anything is held
            t = time.monotonic()
            try:
                runtime = self._next_runtime(ctx, target)
            except BackendError as e:
                return Outcome(NOT_EFFECTIVE, target, {"reason": f"no runtime for the restart: {e}"})
            if runtime.get("reason"):
                return Outcome(NOT_EFFECTIVE, target, runtime)
            runtime["prepare_s"] = round(time.monotonic() - t, 1)
        pid = ctx.spark.driver_pid
        held = park_task(ctx, part, 60000, self.wait_for_task_s) if pid is not None else None
        if held is None:
            self._restore(ctx, runtime)
            why = "no driver running" if pid is None else f"no task of sink partition {part} reached the hook"
            return Outcome(SKIPPED, target, {"reason": why})
        batch, old = held["batch"], held.get("incarnation")
        committed = self._partly_committed(ctx, held, part, pool)
        ev: dict = {"held": {k: held.get(k) for k in ("batch", "partition", "attempt", "incarnation")},
                    f"committed_before_{'stop' if target == 'graceful' else 'kill'}": sorted(committed),
                    "driver_pid": pid}
        if target in OPTIONS:
            ev["overrides"] = self._overrides(ctx, target)
            hooks.write_control(ctx.control, hooks.DRIVER_OVERRIDES, ev["overrides"])
        if runtime is not None:
            ev["runtime"] = runtime
        restarts, since = ctx.spark.restarts(), time.time()
        if target == "graceful":
            graceful = self._stop(ctx, pid, ev)
        else:
            ev["driver_gone"] = ctx.spark.kill_driver(pid)
            hooks.release_holds(ctx.control)
            if not ev["driver_gone"]:
                self._restore(ctx, runtime)
                return Outcome(NOT_EFFECTIVE, target, {**ev, "reason": "the driver survived SIGKILL"})
        replay, ready, moved_on = self._await_restart(ctx, batch, old, since, pool)
        ev["replay"] = {str(k): v for k, v in sorted(replay.items())}
        ev["restarted_with"] = ready and {k: ready.get(k) for k in ("incarnation", "min_partitions", "max_offsets",
                                                                   "pyspark")}
        ev["driver_restarts"] = ctx.spark.restarts() - restarts
        progressed = ready is not None and (bool(replay) or moved_on)
        if target == "graceful":
            exercised = graceful and progressed
        elif target in RUNTIME_TARGETS:
            exercised = bool(committed) and bool(replay) and ready is not None \
                and ready.get("pyspark") == runtime["version"]
            if progressed or ctx.stop.is_set():  # cut short by the run's end: the runtime stays, as heal leaves it
                self._moved(runtime)
                if not progressed:
                    ev["reason"] = "the run ended before the restarted driver committed"
            else:
                log = ctx.spark.driver_log()
                ev["spark_error"] = spark_error(log)
                back = self._rollback(ctx, runtime, pid=ctx.spark.driver_pid)
                ev["reason"] = (f"the driver restarted on PySpark {runtime['version']} did not become ready and "
                                f"commit within {self.restart_wait_s:.0f} s ({ev['driver_restarts']} restart(s); "
                                f"see {log}): a checkpoint written by one PySpark that the other "
                                f"cannot read is a finding. Rolled back to {back}")
        else:
            applied = ready is not None and all(ready.get(k) == v for k, v in ev["overrides"].items())
            exercised = bool(committed) and bool(replay) and applied
        return Outcome(EFFECTIVE, f"{target} (batch {batch} partly committed: {len(committed)}/{pool})", ev,
                       exercised=exercised)

    def _partly_committed(self, ctx: NemesisContext, held: dict, part: int, pool: int) -> set[int]:
        """The sink partitions of the held batch, other than ``part``, that the held task's driver
        committed or skipped while it is held (≤ 20 s; done when all have, or 2 s pass quietly)."""
        batch = held["batch"]
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
        return committed

    def _stop(self, ctx: NemesisContext, pid: int, ev: dict) -> bool:
        """Ask the running driver incarnation to stop its query, release the parked task once it
        acknowledges (≤ :data:`ACK_S` s), wait ≤ ``graceful_wait_s`` for ``stopped``, withdraw the
        request, and wait ≤ :data:`EXIT_WAIT_S` for the driver process to exit; without a clean
        ``stopped`` and exit, SIGKILL the driver instead. Fills ``ev`` (``stop_request``,
        ``graceful_stop``, and ``fallback_kill`` with ``reason`` when it came to that). True when the
        driver stopped through ``query.stop()``."""
        ready = hooks.read_control(ctx.control, hooks.READY) or {}
        inc = ready.get("incarnation", ev["held"]["incarnation"])
        asked = time.time()
        hooks.write_control(ctx.control, hooks.DRIVER_STOP, {"incarnation": inc, "time": asked})
        ev["stop_request"] = {"incarnation": inc, "time": asked}
        t0, released, stopped = time.monotonic(), False, None
        while time.monotonic() - t0 < self.graceful_wait_s and not ctx.stop.is_set():
            got = hooks.read_control(ctx.control, hooks.DRIVER_STOPPED)
            mine = got if got and _same(got.get("incarnation"), inc) and got.get("time", 0) >= asked else None
            if not released and (mine is not None or time.monotonic() - t0 >= ACK_S):
                hooks.release_holds(ctx.control)  # the batch goes on while stop() cancels it
                released = True
            if mine is not None and mine.get("stage") == "stopped":
                stopped = mine
                break
            ctx.stop.wait(0.2)
        hooks.release_holds(ctx.control)
        (ctx.control / hooks.DRIVER_STOP).unlink(missing_ok=True)
        ev["graceful_stop"] = stopped and {**stopped, "seconds": round(stopped["time"] - asked, 2)}
        if stopped is not None and not stopped.get("error"):
            t1 = time.monotonic()  # the driver process exits after stop(); the supervisor restarts it
            while ctx.spark.driver_pid == pid and time.monotonic() - t1 < EXIT_WAIT_S and not ctx.stop.wait(0.2):
                pass
            if ctx.spark.driver_pid != pid:
                ev["graceful_stop"]["exit_s"] = round(time.monotonic() - t1, 2)
                return True
            why = f"the driver stopped its query but did not exit within {EXIT_WAIT_S:.0f} s"
        elif stopped is not None:
            why = f"query.stop() failed: {stopped['error']}"
        elif ctx.stop.is_set():
            why = "the run ended before the driver reported stopped"
        else:
            why = f"the driver did not report stopped within {self.graceful_wait_s:.0f} s of the request"
        ev["fallback_kill"] = {"driver_gone": ctx.spark.kill_driver(pid)}
        ev["reason"] = why + "; SIGKILLed instead"
        return False

    def _await_restart(self, ctx: NemesisContext, batch: int, old, since: float,
                       pool: int) -> tuple[dict[int, str], dict | None, bool]:
        """Watch a new driver incarnation (not ``old``) for ≤ ``restart_wait_s``: what its tasks did with
        ``batch`` (``{sink partition: "commit" | "skip"}``), its ``driver.ready`` (``None`` if none yet),
        and whether it committed a later batch. Done when every sink partition of ``batch`` is accounted
        for, or the pipeline moved past it."""
        replay: dict[int, str] = {}
        ready, moved_on = None, False
        deadline = time.monotonic() + self.restart_wait_s
        while time.monotonic() < deadline and not ctx.stop.wait(0.5):
            for e in sink_events(ctx.control.parent, since):  # one read of sink.jsonl per poll
                if e["event"] not in ("commit", "skip") or _same(e.get("incarnation"), old):
                    continue
                if e.get("batch") == batch:
                    replay.setdefault(e["partition"], e["event"])
                moved_on |= e["event"] == "commit" and e.get("batch", -1) > batch
            r = hooks.read_control(ctx.control, hooks.READY)
            if r is not None and not _same(r.get("incarnation"), old):
                ready = r
            if len(replay) >= pool or moved_on:
                break
        return replay, ready, moved_on

    def _next_runtime(self, ctx: NemesisContext, target: str) -> dict:
        """Choose the PySpark the next driver start runs, for a ``pyspark`` or ``spark-version`` turn:
        ``{"asked": "previous" | "own" | "next-line", "version": X.Y.Z, "from": X.Y.Z}``, or ``{"reason": ...}``
        when there is no next line. Raises ``BackendError`` (the runtime could not be built)."""
        if target == "pyspark":
            asked = None if self.previous_runtime else "previous"
            version = ctx.spark.set_runtime(asked or self.upgraded)
            return {"asked": asked or "own", "version": version}
        now = self.upgraded or ctx.spark.set_runtime(None)
        nxt = spark_release.next_release(now)
        if nxt is None:
            return {"reason": f"no Spark line after {now}'s that the package index serves: start the run on an "
                              f"older one (--spark-version 4.2, 3.5)", "from": now}
        return {"asked": "next-line", "from": now, "version": ctx.spark.set_runtime(nxt)}

    def _moved(self, runtime: dict) -> None:
        """The restarted driver runs ``runtime``: remember where the query now is."""
        if runtime["asked"] == "next-line":
            self.upgraded = runtime["version"]
        else:
            self.previous_runtime = runtime["asked"] == "previous"

    def _own(self, ctx: NemesisContext) -> str:
        """Back to the run's own PySpark (the release spark-version turns moved it to, if any); returns it."""
        return ctx.spark.set_runtime(self.upgraded)

    def _restore(self, ctx: NemesisContext, runtime: dict | None) -> None:
        """After a runtime turn that stopped no driver: the next restart (another fault's) runs what it
        would have run before the turn."""
        if runtime is None:
            return
        if self.previous_runtime:
            ctx.spark.set_runtime("previous")
        else:
            self._own(ctx)

    def _rollback(self, ctx: NemesisContext, runtime: dict | None, pid: int | None) -> str | None:
        """Back to the run's own PySpark after a failed runtime turn (nothing to do for the other targets);
        a driver ``pid`` still running the other one is killed so that it restarts on it. Returns what it
        went back to ("PySpark X.Y.Z")."""
        if runtime is None:
            return None
        back = self._own(ctx)
        self.previous_runtime = False
        if pid is not None:
            ctx.spark.kill_driver(pid)
        return f"PySpark {back}"

    def heal(self, ctx: NemesisContext) -> None:
        """Withdraw an unclaimed hold, release a parked task and withdraw a stop request. The changed
        options and the PySpark runtime stay: the restarted query runs on them, as an upgraded one would
        (a later turn of the same target toggles them back)."""
        hooks.release_holds(ctx.control)
        (ctx.control / hooks.DRIVER_STOP).unlink(missing_ok=True)


_ERROR = re.compile(r"\b([A-Za-z_.]*(?:Exception|Error))\b[:\s]")


def spark_error(log_path) -> str | None:
    """The last error line of the driver log at ``log_path`` (a Java or Python exception: ``...Exception:
    ...`` or ``...Error: ...``, ≤ 500 characters), ``None`` when it has none or cannot be read."""
    try:
        with open(log_path, errors="replace") as f:
            tail = f.readlines()[-400:]
    except (OSError, TypeError):
        return None
    hits = [ln.strip() for ln in tail if _ERROR.search(ln) and not ln.lstrip().startswith("at ")]
    return hits[-1][:500] if hits else None

