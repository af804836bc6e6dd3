"""Input transactions that abort, on purpose (``--input-aborts``, the default 0.1 of the workload's
transactions), on the real local cluster under ``kill-driver``: the bundled pipeline without
``kafka.isolation.level=read_committed`` (``eos-read-uncommitted``) copies aborted input records and is
caught with ``aborted-input-read``, each example naming the input transaction and its outcome. About
100 s on 2 cores. The correct side (eos valid, its completeness guard counting the gaps through a second
read_committed reader) is asserted on ``test_fault_families.py``'s eos run, which has the same input."""

from __future__ import annotations

import pytest

from onceproof.workloads.transactional_client import ABORTED_ON_PURPOSE
from tests.conftest import load_run, our_processes, run_cli

pytestmark = pytest.mark.cluster


def _run(results_root, sink: str, expect: int) -> tuple:
    p = run_cli(["run", "--sink", sink, "--nemesis", "kill-driver", "--time-limit", "25", "--seed", "1",
                 "--results", str(results_root)], timeout=700)
    out = p.stdout + p.stderr
    assert p.returncode != 254, out[-3000:]
    run_dir, result, ops = load_run(results_root)
    assert p.returncode == expect, (result.get("verdict"), result.get("counts"), out[-3000:])
    assert not our_processes(str(run_dir)), "processes of the run left running"
    inp = result["input"]
    assert inp["producer"] == "transactional" and inp["input_aborts"] == 0.1, inp
    assert inp["aborted_on_purpose"] > 0 and inp["hold_ms"] == 3000, inp
    fails = result["stats"]["sends_fail"]
    assert fails > 0, result["stats"]  # the aborted transactions' sends are fail ops
    return run_dir, result, out


@pytest.mark.timeout(800)
def test_eos_read_uncommitted_is_caught_copying_aborted_input(results_root):
    run_dir, result, out = _run(results_root, "eos-read-uncommitted", 1)
    c = result["counts"]
    assert result["verdict"] == "invalid" and c["aborted-input-read"] > 0, c
    ex = result["anomalies"]["aborted-input-read"][0]
    assert ex["input_outcome"] == ABORTED_ON_PURPOSE and "#" in ex["input_txn"], ex
    assert "aborted-input-read" in out
