"""Sink capabilities (each sink entry's, ``sinks/base.py``): a fault the sink cannot take is refused when asked for by
name, left out of ``--nemesis all`` with the reason, and a fault given without a target never draws a
target the sink cannot take. Pure logic: configs, plans and a stand-in Spark; no cluster.

Why (issue 7's at-least-once soak, seed 6): ``commit-delay:precommit`` and ``:txn-timeout`` against
Spark's own Kafka sink waited out 155 s of holds with nothing to hit, and the run ended ``unknown``.
"""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path

import pytest

from onceproof.harness import cli
from onceproof.harness.config import ConfigError, TestConfig
from onceproof.nemesis import catalog
from onceproof.nemesis.fault import NemesisContext
from onceproof.nemesis.kill_executor import KillExecutor
from onceproof.pipeline import hooks
from onceproof.pipeline.transactional_sink import append_event
from onceproof.report import junit
from onceproof.sinks import base as sink_base
from onceproof.sinks import registry as sinks
from tests.stand_in_backend import ExecutorStandInSpark, StandInSpark

NO_TXN = {"kill-broker:txn-coordinator", "pause-broker:txn-coordinator", "commit-delay:precommit",
          "commit-delay:txn-timeout"}


def test_all_against_the_at_least_once_sink_leaves_out_what_it_cannot_take_and_says_why():
    cfg = TestConfig(sink="at-least-once", nemesis=catalog.parse("all"), time_limit=120).validate()
    assert set(cfg.faults_left_out) == NO_TXN
    assert set(cfg.faults) == set(catalog.all_specs()) - NO_TXN
    assert {f for _, f in cfg.fault_plan()} == set(cfg.faults)
    assert "Kafka transactions" in cfg.faults_left_out["kill-broker:txn-coordinator"]
    assert "pre-commit hook" in cfg.faults_left_out["commit-delay:precommit"]
    assert cfg.name == "at-least-once-all" and cfg.replay_command().count("--nemesis all") == 1


@pytest.mark.parametrize("sink", ["eos", "eos-no-marker"])
def test_all_against_a_transactional_sink_keeps_every_fault(sink):
    cfg = TestConfig(sink=sink, nemesis=catalog.parse("all"), time_limit=120).validate()
    assert cfg.faults == catalog.all_specs() and cfg.faults_left_out == {}


@pytest.mark.parametrize("spec,lacks", [
    ("commit-delay:precommit", "pre-commit hook"),
    ("commit-delay:txn-timeout", "Kafka transactions"),
    ("kill-broker:txn-coordinator", "Kafka transactions"),
    ("pause-broker:txn-coordinator", "Kafka transactions"),
])
def test_a_fault_asked_for_by_name_that_the_sink_cannot_take_is_refused(spec, lacks, tmp_path, capsys):
    with pytest.raises(ConfigError) as e:
        TestConfig(sink="at-least-once", nemesis=[spec], time_limit=120).validate()
    assert e.value.option == "--nemesis"
    msg = str(e.value)
    assert spec in msg and "at-least-once" in msg and lacks in msg and "eos" in msg, msg
    results = tmp_path / "results"
    code = cli.main(["run", "--sink", "at-least-once", "--nemesis", spec, "--results", str(results)])
    err = capsys.readouterr().err
    assert code == 254 and spec in err, err
    assert not results.exists()


@pytest.mark.parametrize("seed", range(8))
def test_a_fault_without_a_target_draws_only_targets_the_sink_can_take(seed):
    cfg = TestConfig(sink="at-least-once", nemesis=["kill-broker", "pause-broker", "commit-delay"],
                     time_limit=600, seed=seed).validate()
    drawn = {f for _, f in cfg.fault_plan()}
    assert not drawn & NO_TXN, drawn
    assert "commit-delay:notify" in drawn
    eos = TestConfig(sink="eos", nemesis=["commit-delay"], time_limit=600, seed=seed).validate()
    assert {f for _, f in eos.fault_plan()} <= set(catalog.expand("commit-delay"))


def test_every_fault_need_is_a_known_capability():
    for spec in catalog.all_specs():
        assert catalog.sink_needs(spec) <= set(sink_base.CAPABILITIES), spec
    assert catalog.sink_needs("commit-delay") == {sink_base.PRECOMMIT_HOOK, sink_base.TRANSACTIONS,
                                                  sink_base.DRIVER_HOOKS}


def _lost_task_log(checkpoint: Path) -> Path:
    log = checkpoint / "driver.log"
    log.write_text("".join(f"WARN TaskSetManager: Lost task 0.0 in stage 3.0 (TID 7) (127.0.0.1 executor {e})\n"
                           for e in ("0", "1")))
    return log


class LoggingSpark(StandInSpark):
    """A stand-in Spark (every optional protocol) whose driver log reports a task lost on each executor."""

    __slots__ = ()

    def driver_log(self) -> Path:
        return _lost_task_log(self.checkpoint)


class CpuLoggingSpark(ExecutorStandInSpark):
    """As :class:`LoggingSpark`, with executor faults but no ``ExecutorPause``: the CPU aim."""

    __slots__ = ()

    def driver_log(self) -> Path:
        return _lost_task_log(self.checkpoint)


def _batches(checkpoint: Path, n: int, every_s: float, commit_after_s: float, stop: threading.Event) -> None:
    """Spark's checkpoint as a micro-batch loop writes it: offsets/N, then commits/N ``commit_after_s``
    later, one batch every ``every_s`` seconds (a stand-in: synthetic files, no Spark)."""
    for d in ("offsets", "commits"):
        (checkpoint / d).mkdir(exist_ok=True)
    for b in range(n):
        (checkpoint / "offsets" / str(b)).write_text("v1")
        if stop.wait(commit_after_s):
            return
        (checkpoint / "commits" / str(b)).write_text("v1")
        if stop.wait(every_s - commit_after_s):
            return


def _batch_ctx(tmp_path: Path, caps, spark=CpuLoggingSpark) -> NemesisContext:
    (tmp_path / "control").mkdir(exist_ok=True)
    return NemesisContext(spark=spark(tmp_path), control=tmp_path / "control", checkpoint=tmp_path,
                          sink_ids=["a", "b"], sink_capabilities=caps)


@pytest.mark.parametrize("spark", [CpuLoggingSpark, LoggingSpark], ids=["cpu-aim", "frozen-blind"])
def test_kill_executor_against_a_sink_without_the_hook_kills_inside_a_batch_window(tmp_path, spark):
    """No sink task will announce itself, so the kill waits for a new offsets/N (not for a task) and lands
    before its commits/N; a task lost on the killed executor makes the turn exercised. Neither stand-in
    reads CPU times or unread bytes: a seeded executor after a seeded delay, or after a blind freeze."""
    ctx, stop = _batch_ctx(tmp_path, sinks.get("at-least-once").capabilities, spark), threading.Event()
    th = threading.Thread(target=_batches, args=(tmp_path, 30, 1.0, 0.9, stop), daemon=True)
    th.start()
    t = time.monotonic()
    try:
        out = KillExecutor(wait_for_task_s=20).invoke(ctx, random.Random(1))
    finally:
        stop.set()
        th.join()
    assert time.monotonic() - t < 10, "waited for a sink task that a sink without the hook never parks"
    assert out.outcome == "effective" and out.was_exercised, out
    assert "micro-batch" in out.evidence["aim"], out.evidence
    (a,) = out.evidence["attempts"]
    assert a["task_lost_logged"] and not a["commit_logged_at_kill"] and a["gone_after"], a
    assert out.target == f"executor {a['executor_id']} (batch {a['batch']})"


def test_kill_executor_without_the_hook_kills_the_busy_executor_not_an_idle_one(tmp_path):
    """Where the backend reads executors' CPU times, the victim is the executor whose CPU time grows (a
    full core here) inside the batch window, never the idle one (constant CPU time)."""
    ctx, stop = _batch_ctx(tmp_path, frozenset()), threading.Event()
    ctx.spark.cpu.update({"0": lambda: 3.0, "1": time.monotonic})
    th = threading.Thread(target=_batches, args=(tmp_path, 30, 1.0, 0.9, stop), daemon=True)
    th.start()
    try:
        out = KillExecutor(retry_wait_s=10).invoke(ctx, random.Random(3))
    finally:
        stop.set()
        th.join()
    assert out.was_exercised, out
    (a,) = out.evidence["attempts"]
    assert a["aim"] == "busy" and a["executor_id"] == "1" and a["cpu_ms_in_poll"] >= 10, a
    assert ctx.spark.calls == [("kill_executor", "1")]


def test_kill_executor_without_the_hook_skips_a_committed_batch_and_gives_up_in_bounded_time(tmp_path):
    """A batch that commits before the seeded delay is not killed in (nothing left to hit); with batches
    always shorter than the delays, the turn ends after ``retry_wait_s`` with nothing killed. The batches
    commit as soon as they are planned (no window to speak of): a window of even 10 ms can outlast the
    shortest delay (70 ms) when both cores are loaded, and the turn would then kill inside it. So the turn
    may see no window at all (skipped) or windows that closed before its delay (not effective, every
    attempt missed); either way nothing is killed and nothing counts as exercised."""
    ctx, stop = _batch_ctx(tmp_path, frozenset()), threading.Event()  # a user's job: no hook at all
    th = threading.Thread(target=_batches, args=(tmp_path, 100, 0.5, 0.0, stop), daemon=True)
    th.start()
    t = time.monotonic()
    try:
        out = KillExecutor(retry_wait_s=3).invoke(ctx, random.Random(2))
    finally:
        stop.set()
        th.join()
    assert time.monotonic() - t < 15  # bounded: retry_wait_s and the last attempt's wait, never a hang
    assert out.outcome in ("not-effective", "skipped") and not out.was_exercised, out
    assert (out.outcome == "skipped") == (not out.evidence["attempts"]), out.evidence
    assert all(a["missed"] == "commits/N logged before the kill" for a in out.evidence["attempts"]), out.evidence
    assert not [c for c in ctx.spark.calls if c[0] == "kill_executor"], ctx.spark.calls


def test_kill_executor_waits_past_a_slow_batch_for_a_sink_with_the_hook(tmp_path):
    """A sink known to have the write hold (the file sink) is waited for past ``wait_for_task_s``, up to
    ``retry_wait_s``: a task that claims the hold late (a slow batch on a loaded machine) is the one killed,
    never an executor picked by the weaker batch-window aim."""
    run = tmp_path / "run"
    (run / "control").mkdir(parents=True)
    ctx = NemesisContext(spark=LoggingSpark(run), control=run / "control", checkpoint=run,
                         sink_ids=["a", "b"], sink_capabilities=sinks.get("file").capabilities)
    stop = threading.Event()

    def late_task():  # claims the hold 1.5 s in, as pipeline/hooks.py's precommit_delay does
        if not stop.wait(1.5):
            spec = run / "control" / hooks.PRECOMMIT_HOLD
            want = json.loads(spec.read_text()).get("partition")
            append_event(str(run / "sink.jsonl"), "1", "hold", batch=3, partition=want, attempt=0, pid=4242)

    th = threading.Thread(target=late_task, daemon=True)
    th.start()
    try:
        out = KillExecutor(wait_for_task_s=0.5, retry_wait_s=4).invoke(ctx, random.Random(1))
    finally:
        stop.set()
        th.join()
    assert out.outcome == "effective" and out.was_exercised, out
    assert out.evidence["aim"] == "executor holding a sink task", out.evidence
    assert out.evidence["held"]["pid"] == 4242 and out.evidence["held"]["batch"] == 3, out.evidence


def test_junit_counts_only_the_faults_the_run_injects(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    cfg = TestConfig(sink="at-least-once", nemesis=catalog.parse("all"), time_limit=120)
    (run / "test.json").write_text(json.dumps({"config": {"nemesis": cfg.nemesis}, "faults": cfg.faults,
                                               "name": cfg.name}))
    (run / "results.json").write_text(json.dumps({
        "verdict": "invalid", "counts": {"duplicate": 3}, "recovery": {"finished": True},
        "faults": {f: {"effective": 1} for f in cfg.faults}}))
    text = junit.write_junit(run).read_text()
    case = text.split('name="faults-took-effect"')[1].split("</testcase>")[0]
    assert "<failure" not in case, case
