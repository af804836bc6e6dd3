"""The ``upgrade`` fault's graceful stop and PySpark switch, as pure logic (issue 10 item 3).

What the driver does with a stop request (``onceproof.job.await_query``) runs against a stand-in query
object; the fault (``nemesis/upgrade.py``) runs against the stand-in backend (``tests/stand_in_backend.py``)
and a stand-in pipeline that answers only through the run's files (``sink.jsonl``, ``control/``), the
way the driver and its sink tasks do. Nothing here says anything about Spark or Kafka themselves: the
real restart of a query from its checkpoint, gracefully or on PySpark 4.2.1, is a cluster run
(``onceproof run --nemesis upgrade:graceful`` / ``upgrade:pyspark``).
"""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path

import pytest

from onceproof.backends.base import BackendError
from onceproof.job import await_query
from onceproof.nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, SKIPPED, NemesisContext
from onceproof.nemesis.upgrade import Upgrade
from onceproof.pipeline import hooks
from tests.stand_in_backend import StandInSpark

# ------------------------------------------------------------------------------------ the driver's side


def test_a_stop_request_is_for_the_incarnation_it_names(tmp_path):
    c = hooks.ControlDir(tmp_path)
    assert not c.stop_requested("2")
    (tmp_path / hooks.DRIVER_STOP).write_text('{"incarnation": "2"')  # torn
    assert not c.stop_requested("2")
    hooks.write_control(tmp_path, hooks.DRIVER_STOP, {"incarnation": 2})
    assert c.stop_requested("2") and c.stop_requested(2) and not c.stop_requested("3")
    assert not hooks.ControlDir(None).stop_requested("2")
    c.mark_stopped("2", stage="stopped", stop_s=1.5, error=None)
    got = json.loads((tmp_path / hooks.DRIVER_STOPPED).read_text())
    assert got["incarnation"] == "2" and got["stage"] == "stopped" and got["stop_s"] == 1.5 and got["pid"] > 0
    assert not list(tmp_path.glob("*.tmp"))


class StandInQuery:
    """A ``StreamingQuery`` as ``await_query`` sees it: ``awaitTermination(timeout)`` returns True once
    the query has ended (after ``ends_after`` polls, or once stopped), ``stop()`` may raise."""

    def __init__(self, ends_after: int | None = None, stop_error: Exception | None = None):
        self.polls, self.stopped, self.ends_after, self.stop_error = 0, False, ends_after, stop_error

    def awaitTermination(self, timeout):  # noqa: N802 - PySpark's name
        assert timeout > 0
        time.sleep(timeout)
        self.polls += 1
        return self.stopped or (self.ends_after is not None and self.polls >= self.ends_after)

    def stop(self):
        self.stopped = True
        if self.stop_error:
            raise self.stop_error


def test_await_query_returns_when_the_query_ends_and_ignores_another_incarnations_request(tmp_path):
    hooks.write_control(tmp_path, hooks.DRIVER_STOP, {"incarnation": "1"})  # an earlier driver's
    q = StandInQuery(ends_after=3)
    assert await_query(q, hooks.ControlDir(tmp_path), "2", poll_s=0.01) == 0
    assert q.polls == 3 and not q.stopped and not (tmp_path / hooks.DRIVER_STOPPED).exists()


def test_await_query_stops_the_query_on_request_and_says_so(tmp_path):
    q = StandInQuery(ends_after=500)  # a request ignored: the query ends by itself 5 s later, unstopped
    threading.Timer(0.1, lambda: hooks.write_control(tmp_path, hooks.DRIVER_STOP, {"incarnation": "4"})).start()
    assert await_query(q, hooks.ControlDir(tmp_path), "4", poll_s=0.01) == 0
    got = json.loads((tmp_path / hooks.DRIVER_STOPPED).read_text())
    assert q.stopped and got["incarnation"] == "4" and got["stage"] == "stopped" and got["error"] is None
    assert got["stop_s"] >= 0


def test_await_query_records_a_stop_that_failed_and_exits_non_zero(tmp_path):
    hooks.write_control(tmp_path, hooks.DRIVER_STOP, {"incarnation": "4"})
    q = StandInQuery(ends_after=500, stop_error=TimeoutError("stream thread still running after 60000 ms"))
    assert await_query(q, hooks.ControlDir(tmp_path), "4", poll_s=0.01) == 1
    got = json.loads((tmp_path / hooks.DRIVER_STOPPED).read_text())
    assert got["stage"] == "stopped" and "TimeoutError" in got["error"]


def test_a_parked_task_goes_on_when_the_hold_is_released(tmp_path):
    hooks.write_control(tmp_path, hooks.PRECOMMIT_HOLD, {"ms": 30000, "partition": 1})
    threading.Timer(0.3, hooks.release_holds, (tmp_path,)).start()
    t = time.monotonic()
    assert hooks.precommit_delay(str(tmp_path), {"partition": 1}, lambda **f: None) == 30000
    assert time.monotonic() - t < 5, "the task stayed parked after the release"
    assert not list(tmp_path.iterdir())  # claimed file gone, nothing left to claim


# ----------------------------------------------------------------------------------- the fault's side


class StandInPipeline(threading.Thread):
    """The driver and its sink tasks as the fault sees them, through files only.

    A task of the held sink partition claims ``precommit-hold-ms`` in batch ``batch`` (a ``hold``
    event); the batch's other partitions commit. A driver kill (``StandInSpark.calls``) or, when
    ``graceful``, a stop request naming the running incarnation (answered ``stopping``, then ``stopped``
    once the parked task was released) ends the incarnation; unless ``restarts`` is false, the next one
    announces ``driver.ready`` (with the runtime the backend was set to and the driver overrides) and
    replays the batch: skip where committed, commit the rest.
    """

    def __init__(self, run: Path, spark: StandInSpark, pool: int = 3, batch: int = 7, graceful: bool = True,
                 restarts: bool = True):
        super().__init__(daemon=True)
        self.run_dir, self.control, self.spark = run, run / "control", spark
        self.pool, self.batch, self.graceful, self.restarts = pool, batch, graceful, restarts
        self.incarnation, self.kills, self.done = 1, 0, threading.Event()
        self.control.mkdir(parents=True, exist_ok=True)
        self._ready()

    def _ready(self) -> None:
        hooks.ControlDir(self.control).mark_ready({"incarnation": str(self.incarnation), "pyspark": self.spark.runtime,
                                                   **hooks.driver_overrides(self.control)})

    def _event(self, event: str, partition: int, **f) -> None:
        with open(self.run_dir / "sink.jsonl", "a") as out:
            out.write(json.dumps({"time": time.time(), "event": event, "incarnation": str(self.incarnation),
                                  "batch": self.batch, "partition": partition, "attempt": 0, **f}) + "\n")

    def _restart(self) -> None:
        self.incarnation += 1
        if not self.restarts:
            return
        self.spark.next_driver(4241 + self.incarnation)
        self._ready()
        for p in range(self.pool):
            self._event("skip" if p != self.held else "commit", p)

    def run(self) -> None:
        self.held = None
        while not self.done.wait(0.02):
            hold = self.control / hooks.PRECOMMIT_HOLD
            if self.held is None and hold.exists():
                self.held = json.loads(hold.read_text())["partition"]
                hold.rename(self.control / f"{hooks.PRECOMMIT_HOLD}.claimed-1-1")
                self._event("hold", self.held, hold_ms=60000)
                for p in range(self.pool):
                    if p != self.held:
                        self._event("commit", p)
            if len([c for c in self.spark.calls if c[0] == "kill_driver"]) > self.kills:
                self.kills += 1
                self._restart()
            if self.graceful and hooks.ControlDir(self.control).stop_requested(self.incarnation):
                c = hooks.ControlDir(self.control)
                c.mark_stopped(self.incarnation, stage="stopping")
                while list(self.control.glob(f"{hooks.PRECOMMIT_HOLD}.claimed-*")) and not self.done.is_set():
                    time.sleep(0.02)  # query.stop() waits for the cancelled batch's thread
                c.mark_stopped(self.incarnation, stage="stopped", stop_s=0.05, error=None)
                self._restart()


@pytest.fixture
def pipeline(tmp_path):
    started = []

    def make(spark: StandInSpark | None = None, **kw) -> tuple[NemesisContext, StandInSpark, StandInPipeline]:
        spark = spark or StandInSpark(tmp_path / "ck")
        p = StandInPipeline(tmp_path, spark, **kw)
        p.start()
        started.append(p)
        ctx = NemesisContext(spark=spark, control=tmp_path / "control", checkpoint=tmp_path / "ck",
                             sink_ids=[f"s-{i}" for i in range(p.pool)])
        return ctx, spark, p

    yield make
    for p in started:
        p.done.set()


def _upgrade(target: str, **kw) -> Upgrade:
    return Upgrade(target, partitions=3, wait_for_task_s=5, restart_wait_s=kw.pop("restart_wait_s", 5), **kw)


def test_graceful_stops_the_query_mid_batch_and_the_next_incarnation_replays_it(pipeline):
    ctx, spark, p = pipeline()
    out = _upgrade("graceful").invoke(ctx, random.Random(1))
    ev = out.evidence
    assert out.outcome == EFFECTIVE and out.exercised, ev
    assert not any(c[0] == "kill_driver" for c in spark.calls), "a graceful stop must not kill"
    assert ev["stop_request"]["incarnation"] == "1" and ev["graceful_stop"]["stage"] == "stopped"
    assert ev["graceful_stop"]["incarnation"] == "1" and ev["graceful_stop"]["seconds"] >= 0
    assert len(ev["committed_before_stop"]) == p.pool - 1 and ev["restarted_with"]["incarnation"] == "2"
    assert sorted(ev["replay"].values()) == ["commit"] + ["skip"] * (p.pool - 1)
    assert not (ctx.control / hooks.DRIVER_STOP).exists(), "the stop request was left for the next driver"


def test_a_driver_that_does_not_stop_is_killed_and_the_turn_is_not_exercised(pipeline):
    ctx, spark, p = pipeline(graceful=False)
    out = _upgrade("graceful", graceful_wait_s=0.5).invoke(ctx, random.Random(1))
    ev = out.evidence
    assert out.outcome == EFFECTIVE and not out.exercised, ev
    assert ("kill_driver", 4242) in spark.calls and ev["fallback_kill"] == {"driver_gone": True}
    assert ev["graceful_stop"] is None and "did not report stopped" in ev["reason"]


def test_min_partitions_still_kills_and_restarts_into_the_new_split(pipeline):
    ctx, spark, p = pipeline()
    out = _upgrade("min-partitions").invoke(ctx, random.Random(1))
    ev = out.evidence
    assert out.outcome == EFFECTIVE and out.exercised, ev
    assert ev["overrides"] == {"min_partitions": 6} and ev["restarted_with"]["min_partitions"] == 6
    assert ev["driver_gone"] and len(ev["committed_before_kill"]) == p.pool - 1


def test_pyspark_toggles_the_runtime_and_checks_what_the_restarted_driver_runs(pipeline):
    ctx, spark, p = pipeline()
    fault = _upgrade("pyspark")
    out = fault.invoke(ctx, random.Random(1))
    assert out.outcome == EFFECTIVE and out.exercised, out.evidence
    assert out.evidence["runtime"]["version"] == StandInSpark.PREVIOUS
    assert out.evidence["restarted_with"]["pyspark"] == StandInSpark.PREVIOUS
    assert [c for c in spark.calls if c[0] == "set_runtime"] == [("set_runtime", "previous")]
    p.held = None  # the next turn parks a task of the replayed batch's successor
    p.batch += 1
    out = fault.invoke(ctx, random.Random(2))
    assert out.outcome == EFFECTIVE and out.exercised, out.evidence
    assert out.evidence["restarted_with"]["pyspark"] == StandInSpark.OWN
    assert [c for c in spark.calls if c[0] == "set_runtime"][-1] == ("set_runtime", None)


def test_pyspark_whose_driver_never_comes_back_rolls_back_and_says_it_is_a_finding(pipeline):
    ctx, spark, p = pipeline(restarts=False)
    fault = _upgrade("pyspark", restart_wait_s=1)
    out = fault.invoke(ctx, random.Random(1))
    ev = out.evidence
    assert out.outcome == EFFECTIVE and not out.exercised, ev
    assert [c[1] for c in spark.calls if c[0] == "set_runtime"] == ["previous", None]
    assert spark.runtime == StandInSpark.OWN and not fault.previous_runtime
    assert ev["restarted_with"] is None and "finding" in ev["reason"] and StandInSpark.PREVIOUS in ev["reason"]


def test_pyspark_without_a_second_runtime_is_not_effective_and_holds_nothing(pipeline):
    spark = StandInSpark(Path("ck"))
    spark.runtimes["previous"] = BackendError("pip install pyspark==4.2.1 failed: no network")
    ctx, spark, p = pipeline(spark)
    out = _upgrade("pyspark").invoke(ctx, random.Random(1))
    assert out.outcome == NOT_EFFECTIVE and "no network" in out.evidence["reason"]
    assert not (ctx.control / hooks.PRECOMMIT_HOLD).exists() and p.held is None
    assert not any(c[0] == "kill_driver" for c in spark.calls)


def test_pyspark_skipped_for_want_of_a_task_puts_the_runtime_back(tmp_path):
    spark = StandInSpark(tmp_path / "ck")
    (tmp_path / "control").mkdir()
    ctx = NemesisContext(spark=spark, control=tmp_path / "control", checkpoint=tmp_path / "ck", sink_ids=["a"])
    fault = Upgrade("pyspark", wait_for_task_s=0.3)
    out = fault.invoke(ctx, random.Random(1))
    assert out.outcome == SKIPPED and "reached the hook" in out.evidence["reason"]
    assert [c[1] for c in spark.calls if c[0] == "set_runtime"] == ["previous", None] and not fault.previous_runtime


def test_heal_releases_a_parked_task_and_withdraws_a_stop_request(tmp_path):
    spark = StandInSpark(tmp_path / "ck")
    ctx = NemesisContext(spark=spark, control=tmp_path, checkpoint=tmp_path / "ck")
    hooks.write_control(tmp_path, hooks.DRIVER_STOP, {"incarnation": "1"})
    (tmp_path / f"{hooks.PRECOMMIT_HOLD}.claimed-9-9").write_text("60000")
    hooks.write_control(tmp_path, hooks.DRIVER_OVERRIDES, {"min_partitions": 12})
    Upgrade("graceful").heal(ctx)
    assert sorted(p.name for p in tmp_path.iterdir()) == [hooks.DRIVER_OVERRIDES]  # the options stay
    assert spark.runtime == StandInSpark.OWN and spark.calls == []  # the runtime is not touched


def test_expected_durations_and_the_package():
    from onceproof.nemesis import catalog, packages

    assert {s: catalog.expected_s(s) for s in packages.specs("upgrade")} == {
        "upgrade:min-partitions": 40.0, "upgrade:max-offsets": 40.0, "upgrade:graceful": 60.0,
        "upgrade:pyspark": 100.0}
    assert catalog.expected_s("upgrade") == 100.0


def test_a_driver_that_stops_its_query_but_does_not_exit_is_killed(pipeline, monkeypatch):
    from onceproof.nemesis import upgrade

    monkeypatch.setattr(upgrade, "EXIT_WAIT_S", 0.5)
    monkeypatch.setattr(StandInSpark, "next_driver", lambda self, pid: None)  # the old driver's process stays
    ctx, spark, p = pipeline()
    out = _upgrade("graceful").invoke(ctx, random.Random(1))
    ev = out.evidence
    assert out.outcome == EFFECTIVE and not out.exercised, ev
    assert ev["graceful_stop"]["stage"] == "stopped" and "did not exit" in ev["reason"]
    assert ("kill_driver", 4242) in spark.calls


# ------------------------------------------------------------------------------ spark-version: the next line

LINES = {"3.5.7": "4.0.4", "4.0.4": "4.1.3", "4.1.3": None}
"""The release of the line after each one (``spark_release.next_release``, stand-in: no PyPI)."""


def _on_spark_35(monkeypatch) -> StandInSpark:
    from onceproof.nemesis import upgrade

    monkeypatch.setattr(upgrade.spark_release, "next_release", LINES.__getitem__)
    spark = StandInSpark(Path("ck"))
    spark.runtimes.update({None: "3.5.7", "4.0.4": "4.0.4", "4.1.3": "4.1.3"})
    spark.runtime = "3.5.7"
    return spark


def test_spark_version_moves_the_query_one_line_up_per_turn_and_stays(pipeline, monkeypatch):
    ctx, spark, p = pipeline(_on_spark_35(monkeypatch))
    fault = _upgrade("spark-version")
    out = fault.invoke(ctx, random.Random(1))
    ev = out.evidence
    assert out.outcome == EFFECTIVE and out.exercised, ev
    assert ev["runtime"]["from"] == "3.5.7" and ev["runtime"]["version"] == "4.0.4"
    assert ev["restarted_with"]["pyspark"] == "4.0.4" and fault.upgraded == "4.0.4"
    p.held = None
    p.batch += 1
    out = fault.invoke(ctx, random.Random(2))
    assert out.exercised and out.evidence["runtime"]["from"] == "4.0.4", out.evidence
    assert out.evidence["restarted_with"]["pyspark"] == "4.1.3"
    p.held = None
    p.batch += 1
    out = fault.invoke(ctx, random.Random(3))  # the newest line: nothing to move to, nothing held
    assert out.outcome == NOT_EFFECTIVE and "no Spark line after 4.1.3" in out.evidence["reason"], out.evidence
    assert p.held is None and spark.runtime == "4.1.3"


def test_spark_version_refused_by_the_new_release_rolls_back_with_sparks_error(pipeline, monkeypatch, tmp_path):
    spark = _on_spark_35(monkeypatch)
    log = tmp_path / "driver-2.log"
    log.write_text("26/11/29 WARN x\npy4j.protocol.Py4JJavaError: An error occurred while calling o42.start.\n"
                   ": java.lang.IllegalStateException: Error reading streaming state file of "
                   "HDFSStateStoreProvider[id = (op=0,part=0)]: unsupported checkpoint version\n"
                   "\tat org.apache.spark.sql.execution.streaming.state.X.read(X.scala:1)\n")
    monkeypatch.setattr(StandInSpark, "driver_log", lambda self: log)
    ctx, spark, p = pipeline(spark, restarts=False)
    fault = _upgrade("spark-version", restart_wait_s=1)
    out = fault.invoke(ctx, random.Random(1))
    ev = out.evidence
    assert out.outcome == EFFECTIVE and not out.exercised, ev
    assert [c[1] for c in spark.calls if c[0] == "set_runtime"] == [None, "4.0.4", None]  # back to 3.5.7
    assert spark.runtime == "3.5.7" and fault.upgraded is None
    assert "finding" in ev["reason"] and "Rolled back to PySpark 3.5.7" in ev["reason"]
    assert ev["spark_error"].startswith(": java.lang.IllegalStateException: Error reading streaming state"), ev


def test_spark_version_is_named_never_drawn():
    from onceproof.harness.config import ConfigError, TestConfig
    from onceproof.nemesis import catalog

    assert catalog.parse("upgrade:spark-version") == ["upgrade:spark-version"]
    assert "upgrade:spark-version" not in catalog.expand("upgrade") + catalog.all_specs()
    with pytest.raises(ValueError, match="choose from: min-partitions, .*spark-version"):
        catalog.parse("upgrade:spark")
    with pytest.raises(ConfigError, match="start it on an older line with --spark-version"):
        TestConfig(nemesis=["upgrade:spark-version"]).validate()
