"""``driver-clock-skew`` (``nemesis/driver_clock.py``) on the real local cluster: the driver started under
libfaketime (its executors not), its clock jumped 20 s forward and 20 s back. The eos sink stays valid; each
turn saw a micro-batch planned under the skew (its ``batchTimestampMs`` 20 s off the real time its
``offsets/N`` was written), committed, and the next batch after the reset on the real clock again; the
executors' sink events stayed on the real clock. ``make test-extended`` (about 3 minutes); ``make test`` has
the forward jump in ``test_fault_families.py``'s run.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from onceproof.backends.common import faketime
from tests.conftest import load_run, our_processes, run_cli

pytestmark = [pytest.mark.cluster, pytest.mark.extended,
              pytest.mark.skipif(faketime.unavailable() is not None, reason=str(faketime.unavailable()))]

SPECS = ("driver-clock-skew:jump-forward", "driver-clock-skew:jump-back")


@pytest.mark.timeout(1200)
def test_eos_is_valid_while_the_drivers_clock_jumps_and_the_batches_show_it(results_root):
    p = run_cli(["run", "--sink", "eos", "--nemesis", ",".join(SPECS), "--time-limit", "60", "--seed", "1",
                 "--results", str(results_root)], timeout=1100)
    run_dir, result, ops = load_run(results_root)
    assert p.returncode == 0 and result["verdict"] == "valid", (result.get("unknown_reasons"), result["counts"],
                                                                p.stdout[-3000:])
    done = {o["f"]: o for o in ops if o["type"] == "info" and o.get("f") in SPECS}
    assert set(done) == set(SPECS), list(done)
    for f, o in done.items():
        ev = o["evidence"]
        assert o["outcome"] == "effective" and o["exercised"], (f, ev)
        off = ev["offset_s"]
        assert abs(off) == 20 and (off > 0) == f.endswith("forward"), ev
        assert abs(ev["during"]["skew_s"] - off) < 3 and ev["during"]["committed"], ev
        assert abs(ev["after"]["skew_s"]) < 3 and ev["offset_after_s"] == 0, ev
    # the executors kept the real clock: their sink events, appended in the order they happened, never step
    # back by the jump (a task on a skewed clock would write a time 20 s before the one above it)
    times = [json.loads(ln)["time"] for ln in (Path(run_dir) / "sink.jsonl").read_text().splitlines() if ln.strip()]
    top = list(itertools.accumulate(times, max))
    steps_back = [round(top[i - 1] - t, 1) for i, t in enumerate(times) if i and top[i - 1] - t > 5]
    assert len(times) > 100 and not steps_back, steps_back[:10]
    assert faketime.read_offset(Path(run_dir) / "driver-clock-offset") == 0
    assert result["stats"]["input_records"] == result["stats"]["output_records"] > 1000, result["stats"]
    assert not our_processes(str(run_dir))
