"""The nemesis runner on synthetic progress: a later fault waits for the pipeline to commit a batch
after the previous fault ended, records how long it waited, and goes ahead (``stalled_s``) when the
pipeline does not recover within ``recover_max_s``. No cluster: stand-in faults and a batch counter."""

from __future__ import annotations

import json
import threading
import time

from nemesis.fault import EFFECTIVE, NemesisContext, Outcome
from nemesis.runner import NemesisRunner
from store.history import HistoryWriter


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
