"""A user's ``--pipeline-cmd`` job that writes a PostgreSQL table (``--output postgres``,
``tests/jobs/postgres_job.py``), on the real local cluster with a real PostgreSQL server the run starts,
under ``kill-driver-in-commit-window`` (watched from outside: the table's committed rows grow after
``offsets/N`` and before ``commits/N``, so the driver is frozen and killed there) and ``kill-broker``:

* the job with its progress row (one transaction per micro-batch, a replay skipped) is ``valid``;
* ``--naive`` (the same transaction without the progress row) is ``invalid`` with ``duplicate`` rows.

The table has only the job's own columns (``key``, ``seq``, ``in_partition``, ``in_offset``): the reader
takes what the contract asks for. About 4 minutes on 2 cores.
"""

from __future__ import annotations

import pytest

from tests.conftest import load_run, our_processes, run_cli

pytestmark = pytest.mark.cluster

JOB = ("{python} tests/jobs/postgres_job.py --bootstrap {bootstrap} --input-topic {input_topic} "
       "--checkpoint {checkpoint} --jars {jars} --dsn {postgres_dsn} --table {output_table}")


def _run(results, extra: str) -> tuple[dict, dict, str]:
    p = run_cli(["run", "--pipeline-cmd", JOB + extra, "--output", "postgres", "--nemesis",
                 "kill-driver-in-commit-window,kill-broker", "--seed", "1", "--time-limit", "40",
                 "--results", str(results)], timeout=900)
    run_dir, result, ops = load_run(results)
    assert not our_processes(str(run_dir)), "a process of the run (the server included) outlived it"
    cw = next(o for o in ops if o.get("type") == "info" and o.get("f") == "kill-driver-in-commit-window")
    assert cw["outcome"] == "effective" and cw["exercised"], cw
    assert cw["evidence"]["mode"] == "watch" and not cw["evidence"]["commit_logged_after_kill"], cw["evidence"]
    return result, cw["evidence"], p.stdout + p.stderr


@pytest.mark.timeout(1800)
def test_a_users_postgres_job_is_valid_with_its_progress_row_and_invalid_without(tmp_path):
    ok, ev, out = _run(tmp_path / "ok", "")
    assert ok["verdict"] == "valid", (ok["counts"], out[-3000:])
    assert ok["postgres"]["rows"] == ok["stats"]["input_records"] > 0, ok["postgres"]
    end = ev["output_end_at_kill"]["0"]
    assert end > ev["output_end_at_offsets_logged"]["0"], ev  # the batch's rows were committed at the kill

    naive, _, out = _run(tmp_path / "naive", " --naive")
    assert naive["verdict"] == "invalid" and naive["counts"]["duplicate"] > 0, (naive["counts"], out[-3000:])
    assert naive["postgres"]["rows"] > naive["stats"]["input_records"], naive["postgres"]
