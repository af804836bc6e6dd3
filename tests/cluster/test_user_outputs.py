"""A user's ``--pipeline-cmd`` job per table output, each on the real local cluster under
``kill-driver-in-commit-window`` (watched from outside: the output's committed end grows after
``offsets/N`` and before ``commits/N``, so the driver is frozen and killed there) and ``kill-broker``,
a correct job ``valid`` and its ``--naive`` variant ``invalid`` with ``duplicate`` rows (under the
commit-window kill alone, which is all a replay needs):

* ``--output postgres`` (``tests/jobs/postgres_job.py``, a real PostgreSQL server the run starts): one
  transaction per micro-batch with a progress row, a replay skipped; naive: no progress row.
* ``--output delta`` (``tests/jobs/delta_job.py``, delta-rs): one Delta commit per micro-batch with a
  ``txn`` action (appId, batchId), a replay skipped; naive: no txn action, no check.

The tables have only the jobs' own columns (``key``, ``seq``, ``in_partition``, ``in_offset``): the
readers take what the contract asks for. About 4.5 minutes per output on 2 cores.
"""

from __future__ import annotations

import pytest

from tests.conftest import load_run, our_processes, run_cli

pytestmark = pytest.mark.cluster

JOBS = {
    "postgres": "{python} tests/jobs/postgres_job.py --dsn {postgres_dsn} --table {output_table}",
    "delta": "{python} tests/jobs/delta_job.py --path {output_path}",
}
COMMON = " --bootstrap {bootstrap} --input-topic {input_topic} --checkpoint {checkpoint} --jars {jars}"


def _run(results, output: str, extra: str, faults: str = "kill-driver-in-commit-window,kill-broker",
         time_limit: str = "40") -> tuple[dict, dict, str]:
    p = run_cli(["run", "--pipeline-cmd", JOBS[output] + COMMON + extra, "--output", output, "--nemesis", faults,
                 "--seed", "1", "--time-limit", time_limit, "--results", str(results)], timeout=900)
    run_dir, result, ops = load_run(results)
    assert not our_processes(str(run_dir)), "a process of the run (the server included) outlived it"
    cw = next(o for o in ops if o.get("type") == "info" and o.get("f") == "kill-driver-in-commit-window")
    assert cw["outcome"] == "effective" and cw["exercised"], cw
    assert cw["evidence"]["mode"] == "watch" and not cw["evidence"]["commit_logged_after_kill"], cw["evidence"]
    return result, cw["evidence"], p.stdout + p.stderr


@pytest.mark.timeout(1800)
def test_a_users_postgres_job_is_valid_with_its_progress_row_and_invalid_without(tmp_path):
    ok, ev, out = _run(tmp_path / "ok", "postgres", "")
    assert ok["verdict"] == "valid", (ok["counts"], out[-3000:])
    assert ok["postgres"]["rows"] == ok["stats"]["input_records"] > 0, ok["postgres"]
    end = ev["output_end_at_kill"]["0"]
    assert end > ev["output_end_at_offsets_logged"]["0"], ev  # the batch's rows were committed at the kill

    # the naive side needs only the replay: the commit-window kill alone, a shorter run
    naive, _, out = _run(tmp_path / "naive", "postgres", " --naive", "kill-driver-in-commit-window", "25")
    assert naive["verdict"] == "invalid" and naive["counts"]["duplicate"] > 0, (naive["counts"], out[-3000:])
    assert naive["postgres"]["rows"] > naive["stats"]["input_records"], naive["postgres"]


@pytest.mark.timeout(1800)
def test_a_users_delta_job_is_valid_with_its_txn_action_and_invalid_without(tmp_path):
    ok, ev, out = _run(tmp_path / "ok", "delta", "")
    assert ok["verdict"] == "valid", (ok["counts"], out[-3000:])
    d = ok["delta"]
    assert d["rows"] == ok["stats"]["input_records"] > 0 and d["txn_latest"].get("delta-job") is not None, d
    assert d["txn_count"] == d["version"] + 1, d  # one txn action per commit: no replay was committed
    assert ev["output_end_at_kill"]["0"] > ev["output_end_at_offsets_logged"]["0"], ev
    assert "delta table read at version" in out

    naive, _, out = _run(tmp_path / "naive", "delta", " --naive", "kill-driver-in-commit-window", "25")
    assert naive["verdict"] == "invalid" and naive["counts"]["duplicate"] > 0, (naive["counts"], out[-3000:])
    assert naive["delta"]["txn_count"] == 0, naive["delta"]
