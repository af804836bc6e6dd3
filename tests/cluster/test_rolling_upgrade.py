"""``rolling-upgrade`` (``nemesis/rolling_upgrade.py``) on the real local cluster: brokers that start on the
oldest supported line (3.5.2) rolled to the newest release (4.4.0) mid-run, ``metadata.version`` finalized,
while Spark's own Kafka sink (at-least-once) loses its driver in a commit window: the checker must still catch its
duplicates, and the roll must still be exercised, each broker's own log naming the new release.

The eos side (valid under the same roll with the commit-window and executor kills) is ``make test-oldest``'s
run on the oldest PySpark (``tests/ran_on.py`` asserts the releases, the verdict and every fault exercised).
In ``make test``: 84 s (2026-11-30).
"""

import pytest

from tests.conftest import NEWEST_KAFKA, load_run, our_processes, run_cli

pytestmark = pytest.mark.cluster


@pytest.mark.timeout(1200)
def test_at_least_once_is_caught_while_the_brokers_roll_to_the_newest_release(results_root):
    to = NEWEST_KAFKA
    p = run_cli(["run", "--sink", "at-least-once", "--nemesis", "kill-driver-in-commit-window,rolling-upgrade",
                 "--kafka-version", "3.5.2", "--kafka-upgrade-to", to, "--time-limit", "40", "--seed", "1",
                 "--results", str(results_root)], timeout=1100)
    assert p.returncode != 254, p.stderr
    run_dir, result, ops = load_run(results_root)
    assert result["verdict"] == "invalid" and result["counts"]["duplicate"] > 0, (result["counts"], p.stdout[-3000:])
    assert p.returncode == 1
    roll = [o for o in ops if o["type"] == "info" and o.get("f") == "rolling-upgrade"]
    assert roll and roll[0]["outcome"] == "effective" and roll[0]["exercised"], roll
    ev = roll[0]["evidence"]
    assert len(ev["from"]) == 3 and set(ev["from"].values()) == {"3.5.2"}, ev["from"]
    assert all(b["logged_version"] == to and b["in_sync_after_s"] is not None for b in ev["brokers"].values()), ev
    assert ev["features_before"]["metadata.version"].startswith("3.5-")
    assert ev["features_after"]["metadata.version"].startswith(".".join(to.split(".")[:2]) + "-")
    versions = result.get("versions") or {}
    assert versions.get("kafka") == "3.5.2" and versions.get("kafka-upgrade-to") == to, versions
    assert not our_processes(str(run_dir)), "processes of the run left running"
