"""Sink capabilities (each sink entry's, ``sinks/base.py``): a fault the sink cannot take is refused when asked for by
name, left out of ``--nemesis all`` with the reason, and a fault given without a target never draws a
target the sink cannot take. Pure logic: configs, plans and a stand-in Spark; no cluster.

Why (issue 7's at-least-once soak, seed 6): ``commit-delay:precommit`` and ``:txn-timeout`` against
Spark's own Kafka sink waited out 155 s of holds with nothing to hit, and the run ended ``unknown``.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

from onceproof.harness import cli
from onceproof.harness.config import ConfigError, TestConfig
from onceproof.nemesis import catalog
from onceproof.nemesis.fault import NemesisContext
from onceproof.nemesis.kill_executor import KillExecutor
from onceproof.report import junit
from onceproof.sinks import base as sink_base
from onceproof.sinks import registry as sinks
from tests.stand_in_backend import StandInSpark

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


class LoggingSpark(StandInSpark):
    """A stand-in Spark whose driver log reports a task lost on each executor."""

    __slots__ = ()

    def driver_log(self) -> Path:
        log = self.checkpoint / "driver.log"
        log.write_text("".join(f"WARN TaskSetManager: Lost task 0.0 in stage 3.0 (TID 7) (127.0.0.1 executor {e})\n"
                               for e in ("0", "1")))
        return log


def test_kill_executor_against_a_sink_without_the_hook_does_not_wait_for_a_task(tmp_path):
    (tmp_path / "control").mkdir()
    ctx = NemesisContext(spark=LoggingSpark(tmp_path), control=tmp_path / "control", checkpoint=tmp_path,
                         sink_ids=["a", "b"], sink_capabilities=sinks.get("at-least-once").capabilities)
    t = time.monotonic()
    out = KillExecutor(wait_for_task_s=20).invoke(ctx, random.Random(1))
    assert time.monotonic() - t < 10, "waited for a sink task that a sink without the hook never parks"
    assert out.outcome == "effective" and out.was_exercised and out.evidence["task_lost_logged"], out
    assert "no pre-commit hook" in out.evidence["aim"], out.evidence


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
