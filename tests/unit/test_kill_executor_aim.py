"""``kill-executor`` against a job without hooks, on a backend that freezes executors
(``nemesis/kill_executor.py``): the executors are frozen when a new ``offsets/N`` appears, the one the
driver launched a task on (bytes it has not read) is thawed and killed, and every other executor is
thawed at once, on every path. Also the pure parts: which executors hold a launch, which one is killed,
and the unread bytes read from ``/proc/<pid>/net/tcp``.

Pure logic over synthetic state: a stand-in Spark (``tests/stand_in_backend.py``) whose executors'
unread bytes follow a rule the test gives, synthetic checkpoint files and socket tables. Nothing here
says anything about Spark or the kernel themselves: ``tests/cluster/test_user_certificate.py`` does.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest

from onceproof.backends.base import Executor
from onceproof.backends.common.spark import driver_port, unread_bytes
from onceproof.nemesis import kill_executor
from onceproof.nemesis.fault import NemesisContext
from onceproof.nemesis.kill_executor import KillExecutor, launched_on, pick_victim
from tests.stand_in_backend import StandInSpark

LAUNCH = 9770  # bytes of a serialized task as Spark 4.2 logged one ("Starting task ... 9770 bytes")


class LostTaskSpark(StandInSpark):
    """A stand-in with every optional protocol whose driver log reports a task lost on the executors
    listed in ``lost`` (the checkpoint directory's ``lost`` file, one id a line)."""

    __slots__ = ()

    def driver_log(self) -> Path:
        lost = (self.checkpoint / "lost").read_text().split() if (self.checkpoint / "lost").exists() else []
        log = self.checkpoint / "driver.log"
        log.write_text("".join(f"WARN TaskSetManager: Lost task 0.0 in stage 3.0 (TID 7) (127.0.0.1 executor {e}): "
                               "ExecutorLostFailure\n" for e in lost))
        return log

    def kill_executor(self, executor: Executor) -> str | None:
        """As Spark's master does, a replacement executor (the next id) follows the kill."""
        super().kill_executor(executor)
        n = 1 + max(int(e.id) for e in [*self.executors(), executor])
        self._executors.append(Executor(str(n), 5000 + n, started=time.time()))
        return None


def _batches(checkpoint: Path, every_s: float, commit_after_s: float, stop: threading.Event,
             in_flight: threading.Event) -> None:
    """offsets/N, then commits/N ``commit_after_s`` later, one batch every ``every_s`` s; ``in_flight``
    is set between the two (synthetic files, no Spark)."""
    for d in ("offsets", "commits"):
        (checkpoint / d).mkdir(exist_ok=True)
    for b in range(1000):
        (checkpoint / "offsets" / str(b)).write_text("v1")
        in_flight.set()
        if stop.wait(commit_after_s):
            return
        in_flight.clear()
        (checkpoint / "commits" / str(b)).write_text("v1")
        if stop.wait(every_s - commit_after_s):
            return


def _run(tmp_path: Path, unread, retry_wait_s: float = 10.0, lost: str = "0 1", stop_after_s: float | None = None):
    """Invoke kill-executor (no hook: a user's job) against batches of 1 s, in flight for 0.9 s, with
    ``unread(executor id, frozen ids, in_flight) -> bytes``; returns (outcome, stand-in, seconds)."""
    (tmp_path / "control").mkdir()
    (tmp_path / "lost").write_text(lost)
    spark = LostTaskSpark(tmp_path)
    stop, in_flight = threading.Event(), threading.Event()
    for e in map(str, range(10)):
        spark.unread[e] = lambda frozen, e=e: unread(e, frozen, in_flight.is_set())
    ctx = NemesisContext(spark=spark, control=tmp_path / "control", checkpoint=tmp_path, sink_ids=["a"],
                         sink_capabilities=frozenset())
    th = threading.Thread(target=_batches, args=(tmp_path, 1.0, 0.9, stop, in_flight), daemon=True)
    th.start()
    if stop_after_s is not None:
        threading.Timer(stop_after_s, ctx.stop.set).start()
    t = time.monotonic()
    try:
        out = KillExecutor(retry_wait_s=retry_wait_s).invoke(ctx, random.Random(2))
    finally:
        stop.set()
        th.join()
    return out, spark, time.monotonic() - t, ctx


def test_the_executor_holding_a_launched_task_is_killed_and_the_others_thawed_at_once(tmp_path):
    """Executor 1 gets the launch while frozen (it cannot read it); it alone is thawed, reads it, is killed,
    and executor 0 is thawed right after: nothing stays frozen, and the lost task makes it exercised."""
    def unread(e, frozen, in_flight):
        return LAUNCH if e == "1" and e in frozen and in_flight else 0

    out, spark, took, _ = _run(tmp_path, unread)
    assert out.outcome == "effective" and out.was_exercised, out
    assert "micro-batch" in out.evidence["aim"] and "frozen" in out.evidence["aim"], out.evidence
    (a,) = out.evidence["attempts"]
    assert a["aim"] == "frozen" and a["executor_id"] == "1" and a["task_lost_logged"], a
    assert a["frozen"] == ["0", "1"] and a["unread_bytes"] == {"0": 0, "1": LAUNCH}, a
    assert a["drained_after_s"] is not None and a["grace_s"] == kill_executor.RUN_GRACE_S[0], a
    assert not a["commit_logged_at_kill"] and a["gone_after"], a
    assert spark.calls == [("freeze_executor", "0"), ("freeze_executor", "1"), ("thaw_executor", "1"),
                           ("kill_executor", "1"), ("thaw_executor", "0")], spark.calls
    assert spark.frozen == set() and took < 5


def test_a_kill_that_lost_no_task_is_retried_in_later_batches_and_stays_unexercised(tmp_path):
    """Spark never reports a task lost: every kill is retried in a later batch, at most BATCH_ATTEMPTS
    kills, each with the next grace; the turn is effective (executors died) but not exercised."""
    def unread(e, frozen, in_flight):
        return LAUNCH if e in frozen and in_flight else 0

    kill_executor_wait = kill_executor._lost_task_logged
    try:  # the 10 s wait for a log line that never comes, shortened
        kill_executor._lost_task_logged = lambda ctx, eid, wait_s: kill_executor_wait(ctx, eid, 0.1)
        out, spark, _, _ = _run(tmp_path, unread, retry_wait_s=30, lost="")
    finally:
        kill_executor._lost_task_logged = kill_executor_wait
    assert out.outcome == "effective" and not out.was_exercised, out
    kills = [a for a in out.evidence["attempts"] if "executor_id" in a]
    assert len(kills) == kill_executor.BATCH_ATTEMPTS, out.evidence
    assert [a["grace_s"] for a in kills] == list(kill_executor.RUN_GRACE_S)
    assert not any(a["task_lost_logged"] for a in kills)
    assert len({a["batch"] for a in kills}) == len(kills), "two kills in one batch"
    assert spark.frozen == set()


def test_no_launch_on_a_frozen_executor_kills_nothing_and_thaws_everything_in_bounded_time(tmp_path):
    """A batch whose tasks ran before the freeze (nothing ever unread): each freeze ends at commits/N with
    nothing killed and every executor thawed; the turn is not effective, within its retry time."""
    out, spark, took, _ = _run(tmp_path, lambda e, frozen, in_flight: 0, retry_wait_s=4)
    assert out.outcome == "not-effective" and not out.was_exercised, out
    assert out.evidence["attempts"] and all("launched on a frozen executor" in a["missed"]
                                            for a in out.evidence["attempts"]), out.evidence
    assert not [c for c in spark.calls if c[0] == "kill_executor"] and spark.frozen == set()
    assert took < 7


def test_a_run_that_stops_mid_freeze_thaws_every_executor(tmp_path):
    """The run ends while the executors wait, frozen, for a launch that never comes (Ctrl-C, the time
    limit): the turn returns, every executor thawed, nothing killed; heal() thaws nothing more."""
    out, spark, took, ctx = _run(tmp_path, lambda e, frozen, in_flight: 0, retry_wait_s=30, stop_after_s=0.5)
    assert took < 3 and spark.frozen == set(), (took, spark.frozen)
    assert not [c for c in spark.calls if c[0] == "kill_executor"]
    assert out.outcome in ("skipped", "not-effective"), out


def test_heal_thaws_an_executor_a_turn_left_frozen(tmp_path):
    """What a turn cut short in another thread left frozen (registered before its SIGSTOP) is thawed by
    heal(), the runner's step on every exit path."""
    spark = StandInSpark(tmp_path)
    ctx = NemesisContext(spark=spark, control=tmp_path, checkpoint=tmp_path)
    fault = KillExecutor()
    e = spark.executors()[1]
    fault._frozen[e.pid] = e
    spark.freeze_executor(e)
    fault.heal(ctx)
    assert spark.frozen == set() and ("thaw_executor", "1") in spark.calls and fault._frozen == {}


def test_which_executors_hold_a_launch():
    assert launched_on({"0": 0, "1": LAUNCH, "2": None, "3": 120, "4": 1500}) == ["1", "4"]
    assert launched_on({"0": None}) == []


def test_the_victim_is_the_executor_started_first_ties_seeded():
    old, new = Executor("3", 300, started=100.0), Executor("4", 400, started=200.0)
    assert pick_victim([new, old], random.Random(1)) == old
    a, b = Executor("0", 10, 0.0), Executor("1", 11, 0.0)
    picks = {pick_victim([a, b], random.Random(s)).id for s in range(20)}
    assert picks == {"0", "1"}
    assert pick_victim([b, a], random.Random(5)) == pick_victim([a, b], random.Random(5))


TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:A3F2 0100007F:8765 01 00000000:00002632 00:00000000 00000000     0        0 5001 1 0
   1: 0100007F:A3F3 0100007F:8765 01 00000000:00000010 00:00000000 00000000     0        0 5002 1 0
   2: 0100007F:A3F4 0100007F:0FA1 01 00000000:00000400 00:00000000 00000000     0        0 5003 1 0
   3: 0100007F:A3F5 0100007F:8765 06 00000000:00000500 00:00000000 00000000     0        0 5004 1 0
   4: 0100007F:A3F6 0100007F:8765 01 00000000:00000700 00:00000000 00000000     0        0 9999 1 0
"""
TCP6 = ("  sl  local_address remote_address st tx_queue rx_queue tr tm->when retrnsmt uid timeout inode\n"
        "   0: 00000000000000000000000001000000:B000 00000000000000000000000001000000:8765 01 "
        "00000000:00000100 00:00000000 00000000     0        0 6001 1 0\n")


def test_unread_bytes_sum_the_receive_queues_of_the_executors_own_sockets_to_the_driver_port():
    """Established (st 01), the executor's inode, remote port 0x8765: 0x2632 + 0x10 + 0x100 bytes. Another
    port (0x0FA1), a TIME_WAIT socket (06) and another process's socket (9999) do not count."""
    assert unread_bytes([TCP, TCP6], {5001, 5002, 5003, 5004, 6001}, 0x8765) == 0x2632 + 0x10 + 0x100
    assert unread_bytes([TCP], set(), 0x8765) == 0
    assert unread_bytes(["header only\n", "garbage\n  0: x y 01 zz\n"], {1}, 1) == 0


@pytest.mark.parametrize("cmd,port", [
    ("java -cp x org.apache.spark.executor.CoarseGrainedExecutorBackend --driver-url "
     "spark://CoarseGrainedScheduler@localhost:44469 --executor-id 1", 44469),
    ("... --driver-url spark://CoarseGrainedScheduler@[::1]:7078 --executor-id 0", 7078),
    ("java -cp x org.apache.spark.deploy.worker.Worker", None),
])
def test_the_driver_port_comes_from_the_executors_driver_url(cmd, port):
    assert driver_port(cmd.split()) == port


class FailingKillSpark(LostTaskSpark):
    """A backend whose kill raises (a bug, a lost permission): the freeze must not outlive it."""

    __slots__ = ()

    def kill_executor(self, executor: Executor) -> str | None:
        self.calls.append(("kill_executor", executor.id))
        raise RuntimeError("kill failed")


def test_a_kill_that_raises_leaves_no_executor_frozen(tmp_path):
    (tmp_path / "control").mkdir()
    spark = FailingKillSpark(tmp_path)
    stop, in_flight = threading.Event(), threading.Event()
    for e in ("0", "1"):
        spark.unread[e] = lambda frozen, e=e: LAUNCH if e in frozen and in_flight.is_set() else 0
    ctx = NemesisContext(spark=spark, control=tmp_path / "control", checkpoint=tmp_path, sink_ids=["a"],
                         sink_capabilities=frozenset())
    th = threading.Thread(target=_batches, args=(tmp_path, 1.0, 0.9, stop, in_flight), daemon=True)
    th.start()
    fault = KillExecutor(retry_wait_s=10)
    try:
        with pytest.raises(RuntimeError, match="kill failed"):
            fault.invoke(ctx, random.Random(2))
    finally:
        stop.set()
        th.join()
    assert ("kill_executor", "0") in spark.calls and spark.frozen == set() and fault._frozen == {}, spark.calls
