"""The runner's phases against the stand-in backend (``tests/stand_in_backend.py``): every resource's
teardown step runs, in reverse order of creation, whatever fails first; the run still writes its
results. Pure logic: the stand-in has no process, and topic creation (Kafka's) is stood in for."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from onceproof.backends import registry
from onceproof.harness import runner
from onceproof.harness.config import TestConfig
from tests.stand_in_backend import StandInCluster, StandInSpark

TEARDOWN_ORDER = ["driver stop", "cluster down", "proxy network stop", "remove broker data", "close histories",
                  "process reaper stop"]


@pytest.fixture
def stand_in(monkeypatch, tmp_path):
    monkeypatch.setitem(registry.BACKENDS, "stand-in", "tests.stand_in_backend:StandInBackend")
    monkeypatch.setattr(registry, "_made", {})
    monkeypatch.setattr(runner.topics, "create_topics", lambda *a, **k: None)
    monkeypatch.setenv("ONCEPROOF_RUN", "")  # run() sets it; restored (unset) after the test
    built = {}
    for cls, attr in ((StandInCluster, "cluster"), (StandInSpark, "spark")):
        init = cls.__init__

        def record(self, *a, _init=init, _attr=attr, **k):
            _init(self, *a, **k)
            built[_attr] = self
        monkeypatch.setattr(cls, "__init__", record)
    return TestConfig(backend="stand-in", proxy=True, results_root=tmp_path / "results"), built


def _run(cfg: TestConfig) -> tuple[int, dict]:
    code, rd = runner.run(cfg, Console(file=io.StringIO(), width=120))
    return code, json.loads((rd / "results.json").read_text())


@pytest.mark.parametrize("failure,why", [(RuntimeError("the driver would not start"), "would not start"),
                                         (KeyboardInterrupt(), "interrupted")])
def test_a_setup_failure_still_tears_down_every_resource_in_reverse_order(stand_in, monkeypatch, failure, why):
    cfg, built = stand_in

    def start(self):
        raise failure
    monkeypatch.setattr(StandInSpark, "start", start)
    code, result = _run(cfg)
    assert code == 255 and result["verdict"] == "crashed" and why in result["error"], result
    assert list(result["teardown"]["steps_s"]) == TEARDOWN_ORDER and not result["teardown"]["errors"]
    assert ("down", False) in built["cluster"].calls and ("clean",) in built["cluster"].calls
    assert ("stop",) in built["spark"].calls
    assert registry.get("stand-in").built == ["cluster", "network", "spark"]


def test_a_failing_teardown_step_does_not_skip_the_others(stand_in, monkeypatch):
    cfg, built = stand_in
    monkeypatch.setattr(StandInSpark, "ready", lambda self: (_ for _ in ()).throw(RuntimeError("no query")))

    def down(self, graceful=False):
        raise OSError("cluster down blew up")
    monkeypatch.setattr(StandInCluster, "down", down)
    code, result = _run(cfg)
    assert code == 255 and "no query" in result["error"]
    assert list(result["teardown"]["steps_s"]) == TEARDOWN_ORDER
    assert [e.split(":")[0] for e in result["teardown"]["errors"]] == ["cluster down"]
    assert ("clean",) in built["cluster"].calls and ("stop",) in built["spark"].calls


def test_without_a_fault_network_none_is_built(stand_in, monkeypatch):
    cfg, built = stand_in
    cfg.proxy = False
    monkeypatch.setattr(StandInSpark, "start", lambda self: (_ for _ in ()).throw(RuntimeError("stop here")))
    code, result = _run(cfg)
    assert "proxy network stop" not in result["teardown"]["steps_s"]
    assert registry.get("stand-in").built == ["cluster", "spark"]


@pytest.mark.parametrize("early", [True, False])
def test_a_driver_that_can_wait_for_its_topic_starts_with_the_brokers_and_is_still_torn_down_first(
        stand_in, monkeypatch, early):
    cfg, built = stand_in
    order: list[str] = []
    monkeypatch.setattr(StandInSpark, "starts_before_cluster", property(lambda self: early))
    monkeypatch.setattr(StandInSpark, "start", lambda self: order.append("spark start"))
    monkeypatch.setattr(StandInCluster, "up", lambda self, timeout_s=120.0: order.append("kafka up"))
    monkeypatch.setattr(runner.topics, "create_topics", lambda *a, **k: order.append("topics"))
    monkeypatch.setattr(StandInSpark, "ready", lambda self: (_ for _ in ()).throw(RuntimeError("stop here")))
    code, result = _run(cfg)
    assert code == 255 and "stop here" in result["error"]
    assert order == (["spark start", "kafka up", "topics"] if early else ["kafka up", "topics", "spark start"])
    # the early start changes no teardown: the driver still stops before the brokers
    assert list(result["teardown"]["steps_s"]) == TEARDOWN_ORDER
