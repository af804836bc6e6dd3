"""``kill-executor``: SIGKILL the Spark executor JVM that is running a sink task, mid-transaction.

Deterministic, not hopeful (as ``kill-driver-in-commit-window``): a random executor kill between
micro-batches hits no task at all and tests nothing. So the nemesis asks the sink's pre-commit hook
(``pipeline/hooks.py``) to park the next task of one seeded sink partition after ``flush()`` and before
``commit_transaction()``, waits for that task to announce itself in ``sink.jsonl`` (``hold`` with its
Python worker's pid), asks the backend (:class:`onceproof.backends.base.SparkApp`) for the executor running that
task, and SIGKILLs it. The task's open Kafka
transaction must then be fenced by the retry's ``init_transactions()`` and the (batch, partition)
committed once by another attempt.

A sink known to have the hook is waited for up to ``retry_wait_s`` (a slow batch may leave the partition
short of its hold in the first ones); one of unknown capabilities for ``wait_for_task_s``.

Evidence: the held task (batch, sink partition, attempt, worker pid), the executor id and pid, that the
pid is gone, and the retry that later committed or skipped the same (batch, partition).
``exercised`` is true when the killed executor provably held a running sink task.

A sink without the hook (``at-least-once``, a user's ``--pipeline-cmd`` job) is aimed at a micro-batch
in flight instead. Spark's ``MicroBatchExecution`` logs ``offsets/N`` in the checkpoint before it runs
batch N's tasks and ``commits/N`` after they all finished; a job whose executors only read Kafka (the
driver collects each batch: ``examples/driver_txn_pipeline.py``) runs tasks of tens of milliseconds, too
short to be caught running by chance. So, where the backend can freeze executors
(:class:`onceproof.backends.base.ExecutorPause`), each attempt holds the batch's tasks in flight:

1. wait (polling every :data:`POLL_S`) for a new ``offsets/N`` without ``commits/N``;
2. SIGSTOP every executor JVM. The driver still launches the batch's tasks on them: a launch is a message
   (the serialized task description, a few KB) that a frozen JVM cannot read, so it waits in the kernel's
   receive queue of the executor's connection to the driver (the backend's ``executor_unread_bytes``) and
   the task stays launched on that executor;
3. wait up to :data:`LAUNCH_WAIT_S` for ≥ :data:`LAUNCH_BYTES` unread on a frozen executor, and pick
   the victim among the executors holding one (:func:`pick_victim`: the one started first);
4. thaw the victim alone until it has read its launch (≤ :data:`DRAIN_WAIT_S`), let it run
   :data:`RUN_GRACE_S` (it starts the task and reports it running; Spark logs ``Lost task`` at WARN only
   for a task reported running, one lost while still launching only at INFO), SIGKILL it, and thaw the
   others at once, in a ``finally``. Every frozen executor is registered before its SIGSTOP and
   :meth:`KillExecutor.heal` thaws whatever a cut-short turn left frozen (the runner heals on every exit
   path, Ctrl-C included). The others stay frozen for about :data:`SETTLE_S` + the drain + the grace
   after the launch: well inside Spark's heartbeat timeout.

Where no executor's unread bytes can be read, the victim is a seeded one after :data:`BLIND_LAUNCH_S`
frozen (``aim: frozen-blind``). A backend without ``ExecutorPause`` keeps the older CPU aim: sample every
executor JVM's CPU time (``executor_cpu_s``) each :data:`POLL_S` until ``commits/N``, and kill the first
busy for :data:`BUSY_SHARE` of a core and older than :data:`WARM_S` (a new JVM is busy compiling), or,
where CPU times cannot be read, a seeded one after a seeded delay (:data:`BATCH_DELAYS_S`).

Either way the turn is exercised only when Spark's driver log reports a task lost on the killed executor
(``TaskSetManager: Lost task ... (executor <id>)``); a kill that lost no task is retried in a later
batch, at most :data:`BATCH_ATTEMPTS` kills (and :data:`TRIES` attempts) within ``retry_wait_s``. A turn
whose kills all lost no task stays effective and not exercised. Evidence: ``aim`` (names the micro-batch)
and per attempt the batch, ``aim`` (``frozen``, ``frozen-blind``, ``busy``, ``delay``), the executors
frozen, their unread bytes (B) when the launch was seen and after how long (s), the victim's drain time
and grace (s), how long the executors were frozen (s), the executor id and pid killed, ``gone_after``,
``commit_logged_at_kill``, ``task_lost_logged``, or ``missed`` with the reason.
"""

from __future__ import annotations

import random
import re
import time

from onceproof.backends.base import Executor, ExecutorPause
from onceproof.nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, SKIPPED, NemesisContext, Outcome, park_task, sink_events
from onceproof.pipeline import hooks
from onceproof.sinks.base import PRECOMMIT_HOOK, WRITE_HOLD
from onceproof.store import checkpoint

BATCH_ATTEMPTS = 4
"""Kills per turn aimed at a micro-batch in flight before the turn gives up (each waits for a new batch)."""
TRIES = 2 * BATCH_ATTEMPTS
"""Attempts per turn, each in its own micro-batch (one that saw no task launch on a frozen executor, or no
busy executor, kills nothing)."""
LAUNCH_WAIT_S = 3.0
"""How long the executors stay frozen waiting for the driver to launch a task on one (s)."""
LAUNCH_BYTES = 1000
"""Unread bytes on a frozen executor's scheduler connection that mean a task launch: a serialized task
description is several KB (Spark logs its size: 9,770 bytes for a small PySpark task on 4.2), a heartbeat
reply tens of bytes."""
SETTLE_S = 0.05
"""After the first launch is seen, the wait for the others of the same task set (s)."""
DRAIN_WAIT_S = 2.0
"""How long the thawed victim may take to read its launch (s)."""
RUN_GRACE_S = (0.03, 0.06, 0.015, 0.1)
"""After the victim read its launch, how long it runs before the kill (s), by kill number: long enough
for its task to start and report itself running (the driver logs ``Lost task`` at WARN only for a task
reported running; a task lost while still launching is logged at INFO, which a user's driver log at WARN
does not show), short enough that the task has not finished. Varied, as a retry cannot tell which of the
two a miss was."""
BLIND_LAUNCH_S = 0.5
"""Frozen this long when no executor's unread bytes can be read, then a seeded victim (s)."""
BATCH_DELAYS_S = (0.1, 0.3, 0.6, 1.0)
"""Delay after a new ``offsets/N`` before the kill, per attempt (s; ± 30 %, seeded): the first batches'
tasks start soon after the offsets are logged, a slow batch's later."""
POLL_S = 0.02  # checkpoint and CPU poll interval while waiting for a new offsets/N and a busy executor
BUSY_SHARE = 0.5
"""An executor whose CPU time grew by at least this share of a poll's wall time is running a task."""
WARM_S = 8.0
"""Executors younger than this (s) are skipped: a new JVM's JIT keeps it busy without any task."""


def _lost_task_logged(ctx: NemesisContext, eid: str, wait_s: float) -> bool:
    """Spark's driver log reports a task lost on executor ``eid`` (``TaskSetManager: Lost task ...
    (... executor <eid>)``) within ``wait_s`` seconds."""
    pat = re.compile(rf"Lost task .*executor {re.escape(eid)}\)")
    log = ctx.spark.driver_log()
    deadline = time.monotonic() + wait_s
    while True:
        if log is not None and pat.search(log.read_text(errors="replace")[-2_000_000:]):
            return True
        if time.monotonic() >= deadline or ctx.stop.wait(1.0):
            return False


def launched_on(unread: dict[str, int | None]) -> list[str]:
    """Executor ids (of ``{executor id: unread bytes}``) holding a task launch: at least
    :data:`LAUNCH_BYTES` unread, in the order given."""
    return [e for e, n in unread.items() if n is not None and n >= LAUNCH_BYTES]


def pick_victim(candidates: list[Executor], rng: random.Random) -> Executor:
    """The executor to kill among ``candidates`` (non-empty): the one started first (a JVM that has run
    tasks before reports a new one running within milliseconds; a new one takes longer), the tie (start
    times unknown or equal) broken by ``rng``."""
    first = min(e.started for e in candidates)
    oldest = sorted((e for e in candidates if e.started == first), key=lambda e: (e.id, e.pid))
    return oldest[rng.randrange(len(oldest))]


def _busy_executor(ctx: NemesisContext, batch: int, a: dict) -> Executor | None:
    """The first executor seen busy (:data:`BUSY_SHARE` of a core over one :data:`POLL_S`, older than
    :data:`WARM_S`) before ``commits/<batch>``; ``None`` with ``a["missed"]`` set, or with ``a["aim"]``
    turned to ``"delay"`` when no executor's CPU time can be read."""
    now = time.time()
    execs = [e for e in ctx.spark.executors() if not e.started or now - e.started >= WARM_S]
    if not execs:
        a["missed"] = "no warm executor"
        return None
    last = {e.pid: ctx.spark.executor_cpu_s(e) for e in execs}
    if all(v is None for v in last.values()):
        a["aim"] = "delay"  # CPU times unreadable here: fall back to a seeded delay
        return None
    t0 = time.monotonic()
    while not ctx.stop.wait(POLL_S):
        if checkpoint.has_commit(ctx.checkpoint, batch):
            a["missed"] = "no executor busy before commits/N"
            return None
        for e in execs:
            now_s = ctx.spark.executor_cpu_s(e)
            before = last.get(e.pid)
            last[e.pid] = now_s
            if now_s is not None and before is not None and now_s - before >= BUSY_SHARE * POLL_S:
                a["busy_after_s"] = round(time.monotonic() - t0, 3)
                a["cpu_ms_in_poll"] = round((now_s - before) * 1000, 1)
                return e
        if time.monotonic() - t0 > 30:
            a["missed"] = "no executor busy within 30 s"
            return None
    return None


def _after_delay(ctx: NemesisContext, rng: random.Random, batch: int, attempt: int, a: dict) -> Executor | None:
    """A seeded-random executor after a seeded delay inside the window (``BATCH_DELAYS_S``, longer at each
    attempt), or ``None`` with ``a["missed"]`` set when ``commits/<batch>`` came first."""
    delay = BATCH_DELAYS_S[min(attempt - 1, len(BATCH_DELAYS_S) - 1)] * rng.uniform(0.7, 1.3)
    a["delay_s"] = round(delay, 3)
    if ctx.stop.wait(delay):
        return None
    if checkpoint.has_commit(ctx.checkpoint, batch):
        a["missed"] = "commits/N logged before the kill"
        return None
    execs = sorted(ctx.spark.executors(), key=lambda e: (e.id, e.pid))
    if not execs:
        a["missed"] = "no live executor"
        return None
    return execs[rng.randrange(len(execs))]


def _drained(ctx: NemesisContext, victim: Executor) -> float | None:
    """Seconds until the thawed ``victim`` read its task launch (fewer than :data:`LAUNCH_BYTES` unread),
    polled every millisecond for up to :data:`DRAIN_WAIT_S` s; ``None`` when it did not (or cannot be
    read)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < DRAIN_WAIT_S:
        n = ctx.spark.executor_unread_bytes(victim)
        if n is None:
            return None
        if n < LAUNCH_BYTES:
            return round(time.monotonic() - t0, 4)
        if ctx.stop.wait(0.001):
            return None
    return None


def _new_batch(ctx: NemesisContext, deadline: float) -> int | None:
    """The next micro-batch N whose ``offsets/N`` appears (after this call) without ``commits/N``, seen
    within :data:`POLL_S`; ``None`` at ``deadline`` (monotonic s) or when the run stops."""
    seen = checkpoint.latest_offset_batch(ctx.checkpoint)
    while time.monotonic() < deadline and not ctx.stop.wait(POLL_S):
        n = checkpoint.latest_offset_batch(ctx.checkpoint)
        if n is not None and n != seen:
            if not checkpoint.has_commit(ctx.checkpoint, n):
                return n
            seen = n
    return None


class KillExecutor:
    name = "kill-executor"

    @staticmethod
    def expected_s(target: str, hold_s: float, txn_timeout_ms: int) -> float:
        """Expected length of one turn, seconds (see ``onceproof.nemesis.catalog.expected_s``)."""
        return 15.0  # a held task, the kill, Spark's retry on a replacement executor

    def __init__(self, wait_for_task_s: float = 30.0, txn_timeout_ms: int = 30000, retry_wait_s: float = 60.0):
        self.wait_for_task_s = wait_for_task_s
        self.retry_wait_s = retry_wait_s
        # long enough to be killed in, short enough not to meet transaction.timeout.ms first
        self.hold_ms = int(max(2000, min(15000, txn_timeout_ms // 2)))
        self._frozen: dict[int, Executor] = {}  # executors frozen now, by pid: heal() thaws them

    def invoke(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        partitions = max(1, len(ctx.sink_ids))
        part = rng.randrange(partitions)
        if ctx.sink_capabilities is not None and not ctx.sink_capabilities & {PRECOMMIT_HOOK, WRITE_HOLD}:
            return self._in_batch(ctx, rng)  # no task will announce itself: aim at the batch window
        # a sink known to have the hook holds a task in some later batch, even when slow batches (a loaded
        # machine) leave the partition short of the hold's row in the first ones: wait the longer retry
        # time before the weaker aim; an unknown sink (None) may never announce a task
        wait_s = self.wait_for_task_s if ctx.sink_capabilities is None else max(self.wait_for_task_s,
                                                                               self.retry_wait_s)
        held = park_task(ctx, part, self.hold_ms, wait_s)
        if held is None:
            self.heal(ctx)
            if ctx.stop.is_set():
                return Outcome(SKIPPED, f"sink partition {part}", {"reason": "the run ended first"})
            return self._in_batch(ctx, rng)  # a pipeline whose sink has no hook (a user's job)
        victim = ctx.spark.executor_of(int(held["pid"]), held.get("host"))
        ev = {"aim": "executor holding a sink task", "sink_partition": part,
              "held": {k: held.get(k) for k in ("batch", "partition", "attempt", "incarnation", "txn_id", "pid",
                                                "host")}}
        if victim is None:
            return Outcome(NOT_EFFECTIVE, f"sink partition {part}", {**ev, "reason": "no executor above the task"})
        eid = victim.id
        why = ctx.spark.kill_executor(victim)
        ev.update(executor_id=eid, pid=victim.pid, gone_after=why is None)
        if why:
            return Outcome(NOT_EFFECTIVE, f"executor {eid}", {**ev, "reason": why})
        retry = self._retry(ctx, held)
        ev["retried_by"] = retry
        return Outcome(EFFECTIVE, f"executor {eid} (sink partition {part})", ev, exercised=True)

    def _retry(self, ctx: NemesisContext, held: dict) -> dict | None:
        """The later commit/skip of the held (batch, partition) by another task (≤ ``retry_wait_s``)."""
        deadline = time.monotonic() + self.retry_wait_s
        key = (held.get("batch"), held.get("partition"))
        while True:
            for e in sink_events(ctx.control.parent, held["time"]):
                if e["event"] in ("commit", "skip") and (e.get("batch"), e.get("partition")) == key \
                        and e.get("pid") != held.get("pid"):
                    return {k: e.get(k) for k in ("event", "attempt", "incarnation", "pid")}
            if time.monotonic() >= deadline or ctx.stop.wait(0.5):
                return None

    def _in_batch(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        """Kill an executor while a micro-batch is in flight (module docstring), retried until Spark reports a
        task lost, at most :data:`BATCH_ATTEMPTS` kills (and :data:`TRIES` attempts) within
        ``retry_wait_s`` s."""
        attempts: list[dict] = []
        deadline = time.monotonic() + self.retry_wait_s
        frozen = issubclass(type(ctx.spark), ExecutorPause)
        ev = {"aim": "executor holding a launched task of a micro-batch (offsets/N logged, commits/N not; "
                     "executors frozen until the kill)" if frozen else
                     "executor during a micro-batch (offsets/N logged, commits/N not)", "attempts": attempts}
        while sum("executor_id" in a for a in attempts) < BATCH_ATTEMPTS and len(attempts) < TRIES:
            batch = _new_batch(ctx, deadline)
            if batch is None:
                break
            a: dict = {"batch": batch, "aim": "frozen" if frozen else "busy"}
            attempts.append(a)
            if frozen:
                kills = sum("executor_id" in b for b in attempts)
                victim = self._frozen_kill(ctx, rng, batch, RUN_GRACE_S[kills % len(RUN_GRACE_S)], a)
            else:
                victim = self._busy_kill(ctx, rng, batch, len(attempts), a)
            if victim is None or "missed" in a:
                continue
            a["task_lost_logged"] = _lost_task_logged(ctx, victim.id, wait_s=10)
            if a["task_lost_logged"]:
                return Outcome(EFFECTIVE, f"executor {victim.id} (batch {batch})", ev, exercised=True)
        killed = [a for a in attempts if a.get("gone_after")]
        if not killed:
            ev["reason"] = "no executor killed inside a batch window before the turn ended"
            return Outcome(NOT_EFFECTIVE if attempts else SKIPPED, evidence=ev)
        return Outcome(EFFECTIVE, f"executor {killed[-1]['executor_id']}", ev, exercised=False)

    def _busy_kill(self, ctx: NemesisContext, rng: random.Random, batch: int, attempt: int,
                   a: dict) -> Executor | None:
        """The CPU aim (a backend without :class:`ExecutorPause`): kill the first busy executor, or a seeded
        one after a seeded delay; the executor killed, or ``None`` with ``a["missed"]`` set."""
        victim = _busy_executor(ctx, batch, a)
        if victim is None and a["aim"] == "delay":
            victim = _after_delay(ctx, rng, batch, attempt, a)
        if victim is None:
            return None
        self._kill(ctx, victim, batch, a)
        return victim

    def _kill(self, ctx: NemesisContext, victim: Executor, batch: int, a: dict) -> None:
        why = ctx.spark.kill_executor(victim)
        a.update(executor_id=victim.id, pid=victim.pid, gone_after=why is None)
        if why:
            a["missed"] = why
        a["commit_logged_at_kill"] = checkpoint.has_commit(ctx.checkpoint, batch)

    def _frozen_kill(self, ctx: NemesisContext, rng: random.Random, batch: int, grace_s: float,
                     a: dict) -> Executor | None:
        """One attempt of the frozen aim in micro-batch ``batch``: freeze every executor, wait for the
        driver to launch a task on one (:meth:`_launched`), thaw that one alone until it has read the
        launch and ``grace_s`` s more (it starts the task and reports it running), SIGKILL it, and thaw
        the others at once. Returns the executor killed, or ``None`` with ``a["missed"]`` set."""
        execs = sorted(ctx.spark.executors(), key=lambda e: (e.id, e.pid))
        if not execs:
            a["missed"] = "no live executor"
            return None
        t0 = time.monotonic()
        held: list[Executor] = []
        victim = None
        try:
            for e in execs:
                self._frozen[e.pid] = e  # before the signal: heal() thaws it on every exit path
                if ctx.spark.freeze_executor(e):
                    held.append(e)
                else:
                    self._frozen.pop(e.pid, None)
            a["frozen"] = [e.id for e in held]
            if not held:
                a["missed"] = "no executor could be frozen"
                return None
            victim = self._launched(ctx, rng, batch, held, a)
            if victim is None:
                return None
            ctx.spark.thaw_executor(victim)
            a["drained_after_s"] = _drained(ctx, victim)
            a["grace_s"] = grace_s
            ctx.stop.wait(grace_s)
            self._kill(ctx, victim, batch, a)
            return victim
        finally:
            for e in held:
                if e is not victim or "executor_id" not in a:  # all but the victim once the kill was tried
                    ctx.spark.thaw_executor(e)
                self._frozen.pop(e.pid, None)
            a["frozen_s"] = round(time.monotonic() - t0, 3)

    def _launched(self, ctx: NemesisContext, rng: random.Random, batch: int, held: list[Executor],
                  a: dict) -> Executor | None:
        """The frozen executor (of ``held``) to kill once the driver launched a task on it (≥
        :data:`LAUNCH_BYTES` unread, seen within :data:`LAUNCH_WAIT_S` s; :func:`pick_victim` among those
        that have one :data:`SETTLE_S` s later); where no executor's unread bytes can be read, a seeded one
        after :data:`BLIND_LAUNCH_S` s. ``None`` with ``a["missed"]`` when no launch came before
        ``commits/<batch>`` or the wait's end."""
        t0 = time.monotonic()
        while not ctx.stop.is_set():
            unread = {e.id: ctx.spark.executor_unread_bytes(e) for e in held}
            if all(n is None for n in unread.values()):
                a["aim"] = "frozen-blind"  # no socket table readable: the launch cannot be seen
                if ctx.stop.wait(BLIND_LAUNCH_S):
                    return None
                return held[rng.randrange(len(held))]
            if launched_on(unread):
                ctx.stop.wait(SETTLE_S)  # the other executors' launches follow within milliseconds
                unread = {e.id: ctx.spark.executor_unread_bytes(e) for e in held}
                ids = launched_on(unread)
                if ids:  # else the executor went away meanwhile: look again
                    a["unread_bytes"] = unread
                    a["launch_seen_after_s"] = round(time.monotonic() - t0, 3)
                    return pick_victim([e for e in held if e.id in ids], rng)
            if checkpoint.has_commit(ctx.checkpoint, batch):
                a["missed"] = "commits/N logged before a task launched on a frozen executor"
                return None
            if time.monotonic() - t0 > LAUNCH_WAIT_S:
                a["missed"] = f"no task launched on a frozen executor within {LAUNCH_WAIT_S} s"
                a["unread_bytes"] = unread
                return None
            ctx.stop.wait(POLL_S)
        a["missed"] = "the run ended first"
        return None

    def heal(self, ctx: NemesisContext) -> None:
        """Thaw every executor a cut-short turn left frozen; withdraw an unclaimed hold. Spark's master
        replaces a killed executor by itself."""
        for e in list(self._frozen.values()):
            if issubclass(type(ctx.spark), ExecutorPause):
                ctx.spark.thaw_executor(e)
            self._frozen.pop(e.pid, None)
        (ctx.control / hooks.PRECOMMIT_HOLD).unlink(missing_ok=True)
