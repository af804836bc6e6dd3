"""``lose-unsynced-writes`` (``nemesis/lazyfs_fault.py``) on the real local cluster, every broker's ``log.dirs``
on a lazyfs layer (``backends/common/lazyfs.py``):

* default cluster (RF 3, ``acks=all``, ``min.insync.replicas=2``): eos stays valid while one broker at a time
  loses what it had not fsynced, and each turn dropped bytes of the run's own segments;
* ``--cluster-config single-replica`` (RF 1): the same power cut destroys the only copy of acknowledged
  records, and the checker says so (output records ``lost``; the input's loss is a platform finding): the
  proof that the fault bites.

Nothing stays mounted. About 3 minutes a run on 2 cores; ``make test-extended`` (needs ``/dev/fuse``).
"""

from pathlib import Path

import pytest

from onceproof.backends.common import lazyfs
from tests.conftest import load_run, our_processes, run_cli

pytestmark = [pytest.mark.cluster, pytest.mark.extended,
              pytest.mark.skipif(lazyfs.unavailable() is not None, reason=str(lazyfs.unavailable()))]

SPECS = ("lose-unsynced-writes:one", "lose-unsynced-writes:leader")


def _no_layer_mounted(run_dir: Path) -> None:
    mounts = Path("/proc/self/mounts").read_text()
    assert not [ln for ln in mounts.splitlines() if "onceproof-lazyfs" in ln and str(run_dir) in ln], mounts


@pytest.mark.timeout(1500)
def test_eos_stays_valid_when_one_broker_at_a_time_loses_its_unsynced_writes(results_root):
    p = run_cli(["run", "--sink", "eos", "--nemesis", ",".join(SPECS), "--time-limit", "40", "--seed", "1",
                 "--results", str(results_root)], timeout=1400)
    run_dir, result, ops = load_run(results_root)
    assert p.returncode == 0 and result["verdict"] == "valid", (result.get("unknown_reasons"), result["counts"],
                                                                p.stdout[-3000:])
    turns = [o for o in ops if o["type"] == "info" and o.get("f") in SPECS]
    assert {o["f"] for o in turns} == set(SPECS)
    for o in turns:
        ev = o["evidence"]
        assert o["outcome"] == "effective" and o["exercised"], (o["f"], ev)
        for lost in ev["lost"].values():
            assert lost["killed"]["status_after"] == "gone" and lost["dropped_bytes"] > 0, lost
        assert sum(ev["pipeline_bytes_dropped"].values()) > 0, ev
        assert all(s is not None for s in ev["started_after_s"].values()), ev
    assert result["stats"]["input_records"] == result["stats"]["output_records"] > 1000, result["stats"]
    _no_layer_mounted(run_dir)
    assert not our_processes(str(run_dir))


@pytest.mark.timeout(1500)
def test_a_single_replica_loses_acknowledged_records_and_the_checker_says_so(results_root):
    p = run_cli(["run", "--sink", "eos", "--cluster-config", "single-replica", "--nemesis", SPECS[0],
                 "--time-limit", "40", "--seed", "1", "--results", str(results_root)], timeout=1400)
    run_dir, result, ops = load_run(results_root)
    assert p.returncode == 1 and result["verdict"] == "invalid", (result["verdict"], result["counts"])
    assert result["counts"]["lost"] > 0, result["counts"]
    _no_layer_mounted(run_dir)
    assert not our_processes(str(run_dir))
