"""Disk faults (``nemesis/disk.py``, the ``disk`` package) on the real local cluster.

* Default cluster (RF 3, ``acks=all``, ``min.insync.replicas=2``): the eos sink stays valid under
  ``corrupt-segment-tail`` at both targets; each turn garbled an output partition's active segment of a killed
  broker, whose own log then reported the corruption at the garbled batch (Kafka 4.1.1 ``LogSegment.recover`` /
  ``LogLoader.recoverLog``) and which came back into every ISR.
* The same under ``disk-full`` at both targets (skipped without the privilege to mount a tmpfs): the broker
  logged ``No space left on device`` and its log directory's failure, exited, and came back; no tmpfs of the
  run is left mounted afterwards.
* ``--cluster-config single-replica`` (RF 1): ``corrupt-segment-tail:leader`` destroys the only copy of
  committed output records, and the checker calls the run invalid with ``lost`` records: the proof that the
  fault bites. ``weak-durability`` (RF 3, min ISR 1, unclean election) is not the proof here: a single disk
  fault on a healthy cluster loses nothing under it, because ``acks=all`` still waits for every ISR member; the
  loss needs the followers out of the ISR before the leader's crash (docs/faults.md, "Disk faults").

Not run when this file was written (a long certification run owned the machine). About 3 minutes a run on 2
cores; ``make test-extended``.
"""

from pathlib import Path

import pytest

from onceproof.backends.common import tmpfs
from tests.conftest import load_run, our_processes, run_cli

pytestmark = [pytest.mark.cluster, pytest.mark.extended]

CORRUPT = ("corrupt-segment-tail:leader", "corrupt-segment-tail:one")
FULL = ("disk-full:leader", "disk-full:one")


def _turns(ops: list[dict], specs) -> list[dict]:
    done = [o for o in ops if o["type"] == "info" and o.get("f") in specs]
    assert {o["f"] for o in done} == set(specs), [o["f"] for o in done]
    return done


def _covered(result: dict, specs) -> None:
    cov = {f"{c['fault']}:{c['target']}": c for c in result["coverage"]}
    for s in specs:  # coverage: planned, effective, exercised
        assert cov[s]["planned"] >= 1 and cov[s]["effective"] >= 1 and cov[s]["exercised"] >= 1, cov[s]


def _no_disk_mounted(run_dir: Path) -> None:
    mounts = Path("/proc/self/mounts").read_text()
    assert not [ln for ln in mounts.splitlines() if ln.startswith(tmpfs.SOURCE) and str(run_dir) in ln], mounts


@pytest.mark.timeout(1500)
def test_eos_is_valid_when_a_crashed_brokers_segment_tail_is_garbled(results_root):
    p = run_cli(["run", "--sink", "eos", "--nemesis", ",".join(CORRUPT), "--time-limit", "90", "--seed", "1",
                 "--results", str(results_root)], timeout=1400)
    run_dir, result, ops = load_run(results_root)
    assert p.returncode == 0 and result["verdict"] == "valid", (result.get("unknown_reasons"), result["counts"],
                                                                p.stdout[-3000:])
    for o in _turns(ops, CORRUPT):
        ev = o["evidence"]
        assert o["outcome"] == "effective" and o["exercised"], (o["f"], ev)
        g, rec = ev["garble"], ev["recovery"]
        assert ev["killed"]["status_after"] == "gone" and g["segment"].startswith("output-"), ev
        assert g["size_before"] > g["start"] >= g["batch_start"] and g["end"] == g["size_before"], g
        if o["f"].endswith(":leader"):
            assert g["partition"] == ev["partition"], ev
        # the broker's own recovery found the garbled batch and truncated there
        assert rec["found"] and rec["invalid_at_byte"] == g["batch_start"], rec
        assert rec["truncated_to_offset"] == g["base_offset"], rec
        assert ev["in_sync_after_s"] is not None, ev
    _covered(result, CORRUPT)
    assert result["stats"]["input_records"] == result["stats"]["output_records"] > 1000, result["stats"]
    assert not our_processes(str(run_dir))


@pytest.mark.timeout(1500)
@pytest.mark.skipif(tmpfs.unavailable() is not None, reason=str(tmpfs.unavailable()))
def test_eos_is_valid_when_a_brokers_disk_fills(results_root):
    p = run_cli(["run", "--sink", "eos", "--nemesis", ",".join(FULL), "--time-limit", "90", "--seed", "1",
                 "--results", str(results_root)], timeout=1400)
    run_dir, result, ops = load_run(results_root)
    assert p.returncode == 0 and result["verdict"] == "valid", (result.get("unknown_reasons"), result["counts"],
                                                                p.stdout[-3000:])
    for o in _turns(ops, FULL):
        ev = o["evidence"]
        assert o["outcome"] == "effective" and o["exercised"], (o["f"], ev)
        assert ev["fill"]["free_after"] == 0 and ev["fill"]["filled_bytes"] > 0, ev["fill"]
        assert ev["gone"] and ev["failure"]["no_space"] and (ev["failure"]["dir_failed"] or ev["failure"]["shutdown"])
        assert ev["freed_bytes"] == ev["fill"]["filled_bytes"] and ev["in_sync_after_s"] is not None, ev
        if o["f"].endswith(":leader"):
            assert ev["moved_after_s"] is not None, ev
    _covered(result, FULL)
    assert result["health_after_heal"]["healthy"], result["health_after_heal"]
    _no_disk_mounted(run_dir)
    assert not our_processes(str(run_dir))


@pytest.mark.timeout(1500)
def test_a_single_replica_loses_the_garbled_committed_records_and_the_checker_says_so(results_root):
    p = run_cli(["run", "--sink", "eos", "--nemesis", "corrupt-segment-tail:leader", "--cluster-config",
                 "single-replica", "--time-limit", "60", "--seed", "1", "--results", str(results_root)], timeout=1400)
    run_dir, result, ops = load_run(results_root)
    # one or more turns, as the time limit fits; a turn before the partition has a batch has nothing to garble
    turns = [o for o in _turns(ops, ("corrupt-segment-tail:leader",)) if o["outcome"] == "effective"]
    assert turns and all(o["evidence"]["recovery"]["found"] for o in turns), turns
    # a committed transaction's only copy was garbled
    assert any(o["evidence"]["garble"]["markers_garbled"]["commit"] >= 1 for o in turns), turns
    assert p.returncode == 1 and result["verdict"] == "invalid", (result["verdict"], result["counts"],
                                                                  p.stdout[-3000:])
    assert result["counts"]["lost"] > 0, result["counts"]
    assert not our_processes(str(run_dir))
