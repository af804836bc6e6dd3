"""``driver-clock-skew`` (``nemesis/driver_clock.py``) on synthetic checkpoints: a stand-in driver plans a
micro-batch every 0.2 s under its own clock, writing ``offsets/N`` as Spark does (``batchTimestampMs`` from
the driver's wall clock, the file's mtime the real time), and commits it. The real driver under libfaketime
is ``tests/cluster/test_driver_clock.py``'s."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from onceproof.backends.base import DriverClock
from onceproof.job import executor_preload
from onceproof.nemesis import catalog, packages
from onceproof.nemesis.driver_clock import OFFSET_S, DriverClockSkew, batch_skew_s, judge
from onceproof.nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, SKIPPED, NemesisContext
from onceproof.store import checkpoint


class StandInDriver:
    """A driver whose wall clock is the real one plus :attr:`offset`, planning and committing a batch every
    ``interval_s``; a jump back stalls it as Spark's trigger does (it waits until its clock reaches the
    planned time). ``DriverClock`` by its methods."""

    def __init__(self, ckpt: Path, interval_s: float = 0.2, skewed_stamps: bool = True):
        self.ckpt, self.interval_s, self.skewed_stamps = ckpt, interval_s, skewed_stamps
        self.offset = 0.0
        self.stop = threading.Event()
        (ckpt / "offsets").mkdir(parents=True)
        (ckpt / "commits").mkdir()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def now(self) -> float:
        return time.time() + self.offset

    def _run(self) -> None:
        n, next_at = 0, self.now()
        while not self.stop.is_set():
            while self.now() < next_at and not self.stop.wait(0.02):  # waitTillTime on the driver's clock
                pass
            stamp = self.now() if self.skewed_stamps else time.time()
            (self.ckpt / "offsets" / str(n)).write_text(
                "v1\n" + json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": int(stamp * 1000)}) + "\n{}\n")
            (self.ckpt / "commits" / str(n)).write_text("v1\n{}\n")
            n, next_at = n + 1, self.now() + self.interval_s

    def driver_clock_unavailable(self):
        return None

    def set_driver_clock_offset(self, seconds: float) -> None:
        self.offset = float(seconds)

    def driver_clock_offset(self) -> float:
        return self.offset


@pytest.fixture
def driver(tmp_path):
    d = StandInDriver(tmp_path / "checkpoint")
    d.thread.start()
    deadline = time.monotonic() + 10
    while checkpoint.latest_commit(d.ckpt) is None or checkpoint.latest_commit(d.ckpt) < 2:  # a running query
        assert time.monotonic() < deadline
        time.sleep(0.05)
    yield d
    d.stop.set()
    d.thread.join(5)


def _ctx(tmp_path, spark) -> NemesisContext:
    return NemesisContext(spark=spark, control=tmp_path / "control", checkpoint=tmp_path / "checkpoint", hold_s=1.0)


def test_the_stand_in_is_a_driver_clock():
    assert issubclass(StandInDriver, DriverClock)


@pytest.mark.parametrize("variant,sign", [("jump-forward", 1), ("jump-back", -1)])
def test_a_turn_measures_the_offset_on_a_batch_planned_under_it_and_zero_after(tmp_path, driver, variant, sign,
                                                                              monkeypatch):
    monkeypatch.setattr("onceproof.nemesis.driver_clock.OFFSET_S", 2)  # a 2 s jump keeps the test short
    monkeypatch.setattr("onceproof.nemesis.driver_clock.TOLERANCE_S", 0.5)
    out = DriverClockSkew(variant).invoke(_ctx(tmp_path, driver), None)
    ev = out.evidence
    assert out.outcome == EFFECTIVE and out.exercised, ev
    assert ev["offset_s"] == sign * 2 and abs(ev["during"]["skew_s"] - sign * 2) < 0.5, ev
    assert abs(ev["after"]["skew_s"]) < 0.5 and ev["after"]["batch"] > ev["during"]["batch"], ev
    assert ev["offset_after_s"] == 0 and driver.offset == 0
    if variant == "jump-back":  # the trigger stalled about the jump before it planned under the skew
        assert ev["held_s"] >= 2, ev


def test_a_driver_whose_batches_do_not_carry_its_clock_is_not_effective(tmp_path, monkeypatch):
    monkeypatch.setattr("onceproof.nemesis.driver_clock.OFFSET_S", 2)
    monkeypatch.setattr("onceproof.nemesis.driver_clock.TOLERANCE_S", 0.5)
    monkeypatch.setattr("onceproof.nemesis.driver_clock.BATCH_WAIT_S", 1.0)
    d = StandInDriver(tmp_path / "checkpoint", skewed_stamps=False)
    d.thread.start()
    try:
        out = DriverClockSkew("jump-forward").invoke(_ctx(tmp_path, d), None)
    finally:
        d.stop.set()
    assert out.outcome == NOT_EFFECTIVE and "did not show the offset" in out.evidence["reason"], out.evidence
    assert d.offset == 0  # healed whatever happened


def test_a_backend_without_a_driver_clock_skips_with_the_reason(tmp_path):
    out = DriverClockSkew("jump-forward").invoke(_ctx(tmp_path, object()), None)
    assert out.outcome == SKIPPED and "cannot offset the driver's clock" in out.evidence["reason"]


def test_pure_parts():
    assert batch_skew_s(1_000_020_500, 1_000_000.5) == 20.0
    assert judge(20, {"skew_s": 19.2}, {"skew_s": 0.4}) and not judge(20, {"skew_s": 0.1}, {"skew_s": 0.0})
    assert not judge(-20, None, {"skew_s": 0.0}) and not judge(20, {"skew_s": 20.0}, None)
    assert OFFSET_S == 20


def test_the_batch_timestamp_is_read_from_the_offset_log(tmp_path):
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "3").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":1795796375113,'
                                            '"conf":{}}\n{"input":{"0":5}}\n')
    (tmp_path / "offsets" / "4").write_text("v1\n")  # torn: no metadata line yet
    assert checkpoint.batch_timestamp_ms(tmp_path, 3) == 1795796375113
    assert checkpoint.batch_timestamp_ms(tmp_path, 4) is None and checkpoint.batch_timestamp_ms(tmp_path, 5) is None


def test_the_executors_keep_the_real_clock_and_the_fault_is_in_the_clock_package():
    lib = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
    assert executor_preload({"LD_PRELOAD": f"{lib} /opt/other.so"}) == {"spark.executorEnv.LD_PRELOAD": "/opt/other.so"}
    assert executor_preload({"LD_PRELOAD": lib}) == {"spark.executorEnv.LD_PRELOAD": ""}
    assert executor_preload({}) == {} and executor_preload({"LD_PRELOAD": "/opt/other.so"}) == {}
    assert "driver-clock-skew:jump-back" in packages.specs("clock")
    assert catalog.needs_driver_clock(["driver-clock-skew"]) and not catalog.needs_clock(["driver-clock-skew"])
    assert os.path.basename(lib).startswith("libfaketime")


def test_the_job_moves_the_clock_variables_into_its_environment_for_the_jvm_only():
    from onceproof.job import clock_env
    from onceproof.pipeline.identity import DRIVER_CLOCK_ENV

    env = {DRIVER_CLOCK_ENV: '{"LD_PRELOAD": "/x/libfaketime.so.1", "FAKETIME_TIMESTAMP_FILE": "/r/off"}', "A": "1"}
    clock_env(env)
    assert env == {"LD_PRELOAD": "/x/libfaketime.so.1", "FAKETIME_TIMESTAMP_FILE": "/r/off", "A": "1"}
    clock_env(env)  # nothing more to move
    assert DRIVER_CLOCK_ENV not in env and env["A"] == "1"
