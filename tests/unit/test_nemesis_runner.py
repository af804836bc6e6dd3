"""The nemesis runner on synthetic progress: a later fault waits for the pipeline to commit a batch
after the previous fault ended, records how long it waited, and goes ahead (``stalled_s``) when the
pipeline does not recover within ``recover_max_s``. No cluster: stand-in faults and a batch counter."""

from __future__ import annotations

import json
import threading
import time

from onceproof.nemesis.fault import EFFECTIVE, NemesisContext, Outcome
from onceproof.nemesis.runner import NemesisRunner
from onceproof.store.history import HistoryWriter


class Batches:
    """A pipeline's latest committed batchId that a test moves by hand."""

    def __init__(self, first: int | None = 0):
        self.n, self.lock = first, threading.Lock()

    def __call__(self) -> int | None:
        with self.lock:
            return self.n

    def commit(self) -> None:
        with self.lock:
            self.n = 0 if self.n is None else self.n + 1


class Recording:
    """A fault that records the committed batch it saw when invoked."""

    def __init__(self, batches: Batches):
        self.batches, self.seen = batches, []

    def invoke(self, ctx, rng) -> Outcome:
        self.seen.append(self.batches())
        return Outcome(EFFECTIVE, "x")

    def heal(self, ctx) -> None:
        pass


def _runner(tmp_path, batches, schedule, recover_max_s):
    fault = Recording(batches)
    ctx = NemesisContext(spark=None, control=tmp_path, checkpoint=tmp_path)
    hist = HistoryWriter(tmp_path / "nemesis.jsonl")
    return fault, NemesisRunner({"f": fault}, schedule, ctx, hist, seed=1, recover_max_s=recover_max_s)


def _invokes(tmp_path):
    ops = [json.loads(line) for line in (tmp_path / "nemesis.jsonl").read_text().splitlines()]
    return [o for o in ops if o["type"] == "invoke"]


def _wait(pred, s=10.0):
    end = time.monotonic() + s
    while not pred():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


def test_a_later_fault_waits_for_a_batch_committed_after_the_previous_fault(tmp_path):
    batches = Batches(first=None)
    fault, nem = _runner(tmp_path, batches, [(0.0, "f"), (0.0, "f")], recover_max_s=30)
    nem.start(progress=batches)
    time.sleep(0.8)
    assert fault.seen == [] and nem.started_at is None  # no batch committed yet: no fault
    batches.commit()  # batch 0
    _wait(lambda: len(fault.seen) == 1)
    time.sleep(1.2)
    assert fault.seen == [0]  # the second fault waits: nothing committed since the first ended
    batches.commit()  # batch 1
    _wait(lambda: len(fault.seen) == 2)
    assert fault.seen == [0, 1]
    nem.stop_and_heal(join_timeout_s=5)
    second = _invokes(tmp_path)[1]
    assert second["recovered_after_s"] >= 1.0 and "stalled_s" not in second, second


def test_a_pipeline_that_does_not_recover_does_not_hold_the_faults_back_forever(tmp_path):
    batches = Batches(first=0)
    fault, nem = _runner(tmp_path, batches, [(0.0, "f"), (0.0, "f")], recover_max_s=1.0)
    nem.start(progress=batches)
    _wait(lambda: len(fault.seen) == 2)
    nem.stop_and_heal(join_timeout_s=5)
    second = _invokes(tmp_path)[1]
    assert 1.0 <= second["stalled_s"] < 5 and "recovered_after_s" not in second, second


def test_stopping_while_waiting_for_recovery_invokes_nothing_more(tmp_path):
    batches = Batches(first=0)
    fault, nem = _runner(tmp_path, batches, [(0.0, "f"), (0.0, "f")], recover_max_s=60)
    nem.start(progress=batches)
    _wait(lambda: len(fault.seen) == 1)
    t = time.monotonic()
    nem.stop_and_heal(join_timeout_s=5)
    assert time.monotonic() - t < 3  # the wait ends at once on stop
    assert len(fault.seen) == 1 and len(_invokes(tmp_path)) == 1


def test_the_fault_time_budget_leaves_out_the_waits_for_recovery(tmp_path):
    batches = Batches(first=0)
    fault, nem = _runner(tmp_path, batches, [(0.0, "f"), (0.0, "f")], recover_max_s=30)
    assert nem.fault_time_s() is None
    nem.start(progress=batches)
    _wait(lambda: len(fault.seen) == 1)
    time.sleep(1.5)  # the second fault waits for a batch: this is recovery, not fault time
    during = nem.fault_time_s()
    assert during < time.monotonic() - nem.started_at - 1.2, during
    batches.commit()
    _wait(lambda: len(fault.seen) == 2)
    nem.stop_and_heal(join_timeout_s=5)
    waited = _invokes(tmp_path)[1]["recovered_after_s"]
    total = time.monotonic() - nem.started_at
    assert waited >= 1.4 and abs(nem.fault_time_s() - (total - waited)) < 0.3, (waited, total, nem.fault_time_s())


class Slow(Recording):
    """A fault that takes ``s`` seconds unless the run stops it (``ctx.stop``)."""

    def __init__(self, batches: Batches, s: float):
        super().__init__(batches)
        self.s, self.finished = s, []

    def invoke(self, ctx, rng) -> Outcome:
        self.seen.append(self.batches())
        self.finished.append(not ctx.stop.wait(self.s))
        return Outcome(EFFECTIVE, "x")


def test_closing_lets_the_fault_in_flight_finish_and_starts_no_other(tmp_path):
    batches = Batches(first=0)
    slow = Slow(batches, 1.5)
    ctx = NemesisContext(spark=None, control=tmp_path, checkpoint=tmp_path)
    nem = NemesisRunner({"f": slow}, [(0.0, "f"), (0.0, "f")], ctx, HistoryWriter(tmp_path / "nemesis.jsonl"),
                        seed=1, recover_max_s=0.5)
    nem.start(progress=batches)
    _wait(lambda: nem.in_flight == "f")
    nem.close()
    assert nem.in_flight == "f"
    _wait(lambda: nem.in_flight is None)
    time.sleep(1.0)  # the second fault would have started by now (recover_max_s 0.5 s)
    assert slow.finished == [True] and len(nem.ops) == 1 and nem.ops[0]["outcome"] == EFFECTIVE
    nem.stop_and_heal(join_timeout_s=5)
    assert len(_invokes(tmp_path)) == 1
