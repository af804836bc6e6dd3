"""A user's ``--pipeline-cmd`` job per table output, each on the real local cluster under
``kill-driver-in-commit-window`` (watched from outside: the output's committed end grows after
``offsets/N`` and before ``commits/N``, so the driver is frozen and killed there) and ``kill-broker``,
a correct job ``valid`` and its ``--naive`` variant ``invalid`` with ``duplicate`` rows (the naive variants
under the commit-window kill alone):

* ``--output kafka`` (``examples/driver_txn_pipeline.py``): each micro-batch collected on the driver and
  produced in one Kafka transaction with a batch marker, a replay skipped; naive: no marker check.
* ``--output postgres`` (``tests/jobs/postgres_job.py``, a real PostgreSQL server the run starts): one
  transaction per micro-batch with a progress row, a replay skipped; naive: no progress row.
* ``--output delta`` (``tests/jobs/delta_job.py``, delta-rs): one Delta commit per micro-batch with a
  ``txn`` action (appId, batchId), a replay skipped; naive: no txn action, no check. The correct job runs
  with ``--pipeline-python`` on another interpreter with another PySpark.
* ``--output files`` (``tests/jobs/files_job.py``): Spark's file sink, its ``_spark_metadata`` log
  committing each batch's files and skipping a replay; naive: ``df.write.json`` from ``foreachBatch``,
  no log, so the directory is read as Spark's batch reader lists it and a replay is there twice.
* ``--output iceberg`` (``tests/jobs/iceberg_job.py``, on PySpark 3.5 with Iceberg's 3.5 runtime in
  ``{jars}``): ``MERGE INTO`` on ``(key, seq)`` per micro-batch, so a replay inserts nothing; naive:
  ``writeTo(...).append()``, on PySpark 4.1.

The tables have only the jobs' own columns (``key``, ``seq``, ``in_partition``, ``in_offset``): the
readers take what the contract asks for. One run per test, each on the session's warm cluster: 43–91 s
on 2 cores (2026-11-30). ``make test`` runs both Delta jobs, the naive PostgreSQL one and the upsert job,
the naive file writer and the Iceberg MERGE job; ``make test-extended`` the rest (tests/README.md).
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import load_run, our_processes, run_cli

pytestmark = pytest.mark.cluster

JOBS = {
    "kafka": "{python} examples/driver_txn_pipeline.py --output-topic {output_topic}",
    "postgres": "{python} tests/jobs/postgres_job.py --dsn {postgres_dsn} --table {output_table}",
    "postgres-upsert": "{python} tests/jobs/postgres_upsert_job.py --dsn {postgres_dsn} --table {output_table}",
    "delta": "{python} tests/jobs/delta_job.py --path {output_path}",
    "files": "{python} tests/jobs/files_job.py --path {output_path}",
    "iceberg": "{python} tests/jobs/iceberg_job.py --table {output_table} --iceberg-conf {iceberg_conf}",
}
SPARK_35 = "3.5.9"
"""The newest PySpark 3.5 on PyPI (2026-11-29): a Spark 3.5 user's job."""
COMMON = " --bootstrap {bootstrap} --input-topic {input_topic} --checkpoint {checkpoint} --jars {jars}"


def _run(results, output: str, extra: str, options: tuple[str, ...] = (), seed: str = "1", job: str = ""
         ) -> tuple[dict, dict, str]:
    """A correct job under both faults for 40 s; a ``--naive`` one under the commit-window kill alone for 30 s
    (its replay is the duplicate: the broker kill, which waits for the driver's recovery, would add about
    30 s to each run and nothing to what it shows)."""
    naive = "--naive" in extra
    nemesis, time_limit = ("kill-driver-in-commit-window", "30") if naive else \
        ("kill-driver-in-commit-window,kill-broker", "40")
    p = run_cli(["run", "--pipeline-cmd", JOBS[job or output] + COMMON + extra, "--output", output, *options,
                 "--nemesis", nemesis, "--seed", seed, "--time-limit", time_limit, "--results", str(results)],
                timeout=900)
    out = p.stdout + p.stderr
    assert p.returncode != 254, out[-3000:]
    run_dir, result, ops = load_run(results)
    assert not our_processes(str(run_dir)), "a process of the run (the server included) outlived it"
    cws = [o for o in ops if o.get("type") == "info" and o.get("f") == "kill-driver-in-commit-window"]
    assert cws, ("the commit-window kill never ended", result.get("verdict"), out[-3000:])
    cw = cws[0]
    assert cw["outcome"] == "effective" and cw["exercised"], (cw, out[-3000:])
    assert cw["evidence"]["mode"] == "watch" and not cw["evidence"]["commit_logged_after_kill"], cw["evidence"]
    return result, cw["evidence"], out


def _why(result: dict, out: str) -> tuple:
    """What a verdict other than the expected one is read by: counts, reasons, latency, the console's tail."""
    return (result.get("verdict"), result.get("counts"), result.get("unknown_reasons"),
            result.get("stats", {}).get("visibility_latency_ms"), out[-3000:])


def _grew(ev: dict) -> bool:
    """Some partition's committed end was past its value at ``offsets/N`` when the driver was killed."""
    before = ev["output_end_at_offsets_logged"]
    return any(end > before.get(p, 0) for p, end in ev["output_end_at_kill"].items())


@pytest.mark.extended  # 65 s on the warm cluster (2026-11-30); make test's 50 minutes: the Iceberg MERGE job
@pytest.mark.timeout(900)
def test_a_users_kafka_job_with_its_batch_marker_is_valid(warm_cluster, tmp_path):
    ok, ev, out = _run(tmp_path, "kafka", "", tuple(warm_cluster))
    assert ok["verdict"] == "valid", _why(ok, out)
    assert ok["stats"]["output_records"] == ok["stats"]["input_records"] > 0, ok["stats"]
    assert _grew(ev), ev  # the batch's transaction was committed at the kill: its LSOs had moved


@pytest.mark.extended  # make test's 50 minutes: tests/cluster/test_user_certificate.py catches this naive job
@pytest.mark.timeout(900)  # in make test (test-all's commit package: the commit-window kill, duplicate)
def test_a_users_kafka_job_without_it_is_invalid_with_duplicate_records(warm_cluster, tmp_path):
    naive, _, out = _run(tmp_path, "kafka", " --naive", tuple(warm_cluster))
    assert naive["verdict"] == "invalid" and naive["counts"]["duplicate"] > 0, _why(naive, out)


@pytest.mark.extended  # 61 s on the warm cluster (2026-11-30); the upsert job and the naive one stay in make test
@pytest.mark.timeout(900)
def test_a_users_postgres_job_with_its_progress_row_is_valid(warm_cluster, tmp_path):
    ok, ev, out = _run(tmp_path, "postgres", "", tuple(warm_cluster))
    assert ok["verdict"] == "valid", _why(ok, out)
    assert ok["postgres"]["rows"] == ok["stats"]["input_records"] > 0, ok["postgres"]
    end = ev["output_end_at_kill"]["0"]
    assert end > ev["output_end_at_offsets_logged"]["0"], ev  # the batch's rows were committed at the kill


@pytest.mark.timeout(900)
def test_a_users_postgres_job_without_it_is_invalid_with_duplicate_rows(warm_cluster, tmp_path):
    naive, _, out = _run(tmp_path, "postgres", " --naive", tuple(warm_cluster))
    assert naive["verdict"] == "invalid" and naive["counts"]["duplicate"] > 0, _why(naive, out)
    assert naive["postgres"]["rows"] > naive["stats"]["input_records"], naive["postgres"]


@pytest.mark.timeout(900)
def test_a_users_postgres_upsert_job_without_an_order_column_is_valid(warm_cluster, tmp_path):
    """Every executor partition upserts on the primary key (key, seq) (``tests/jobs/postgres_upsert_job.py``):
    a replayed batch's ``DO UPDATE`` writes new row versions at new physical places, so the table in
    ``ctid`` order has keys going back; it has no order column, so no order is judged, and the table ends
    with every record once: valid (seed 2, the seed of the false alarm this was)."""
    ok, ev, out = _run(tmp_path, "postgres", "", tuple(warm_cluster), seed="2", job="postgres-upsert")
    assert ok["verdict"] == "valid", _why(ok, out)
    assert ok["order"] == "not judged (no order column)" and ok["postgres"]["order"] is None, ok.get("order")
    assert "order per key: not judged (no order column)" in out, out[-3000:]
    assert ok["postgres"]["rows"] == ok["stats"]["input_records"] > 0, ok["postgres"]
    assert ev["output_end_at_kill"]["0"] > ev["output_end_at_offsets_logged"]["0"], ev  # rows upserted at the kill


@pytest.mark.timeout(1200)
def test_a_users_delta_job_with_its_txn_action_is_valid(warm_cluster, tmp_path):
    """Run on another interpreter with another PySpark (``--pipeline-python``; the cached previous-minor
    runtime, ``backends/local/runtimes.py``, stands for a user's venv): its driver and Python workers run
    there, with the Kafka connector resolved for that PySpark."""
    from onceproof.backends.local import runtimes

    rt = runtimes.ensure()  # ~40 s on first use, cached after
    ok, ev, out = _run(tmp_path, "delta", "", ("--pipeline-python", str(rt.python), *warm_cluster))
    assert ok["verdict"] == "valid", _why(ok, out)
    d = ok["delta"]
    assert d["rows"] == ok["stats"]["input_records"] > 0 and d["txn_latest"].get("delta-job") is not None, d
    assert d["txn_count"] == d["version"] + 1, d  # one txn action per commit: no replay was committed
    assert ev["output_end_at_kill"]["0"] > ev["output_end_at_offsets_logged"]["0"], ev
    assert "delta table read at version" in out
    driver_log = (tmp_path / "latest" / "logs" / "driver-1.log").read_text()
    assert f"delta_job: pyspark {rt.version} in {rt.python}" in driver_log, driver_log[-2000:]
    # {jars}: Delta's connector built for that PySpark's Spark line
    line = ".".join(rt.version.split(".")[:2])
    assert f"in --jars: delta-spark_{line}_2.13-" in driver_log, driver_log[-2000:]


@pytest.mark.timeout(900)
def test_a_users_delta_job_without_it_is_invalid_with_duplicate_rows(warm_cluster, tmp_path):
    naive, _, out = _run(tmp_path, "delta", " --naive", tuple(warm_cluster))
    driver_log = (tmp_path / "latest" / "logs" / "driver-1.log").read_text()
    assert "delta_job: Delta's Spark connector in --jars: none" in driver_log, driver_log[-2000:]  # none for 4.3
    assert naive["verdict"] == "invalid" and naive["counts"]["duplicate"] > 0, _why(naive, out)
    assert naive["delta"]["txn_count"] == 0, naive["delta"]


@pytest.mark.extended  # 98 s; its failing side stays in make test (the 50-min budget)
@pytest.mark.timeout(900)
def test_a_users_file_sink_job_is_valid_through_its_metadata_log(tmp_path):
    ok, ev, out = _run(tmp_path, "files", "")
    assert ok["verdict"] == "valid", _why(ok, out)
    fs = ok["file_sink"]
    assert fs["read"] == "committed" and fs["committed_records"] == ok["stats"]["input_records"] > 0, fs
    assert ev["output_end_at_kill"]["0"] > ev["output_end_at_offsets_logged"]["0"], ev  # _spark_metadata/N written


@pytest.mark.timeout(1200)
def test_a_users_foreachbatch_file_writer_on_spark_3_5_is_invalid_with_duplicate_records(warm_cluster, tmp_path):
    """On PySpark 3.5 (the cached runtime stands for a user's venv, ``--pipeline-python``): its driver
    gets the Scala 2.12 Kafka connector of its line in ``{jars}`` (the newest 3.5 patch Maven serves),
    and the run records the job's versions, not the harness's."""
    from onceproof.backends.common import jars
    from onceproof.backends.local import runtimes

    rt = runtimes.ensure(SPARK_35)  # ~40 s on first use, cached after
    naive, ev, out = _run(tmp_path, "files", " --naive", ("--pipeline-python", str(rt.python), *warm_cluster))
    versions = json.loads((tmp_path / "latest" / "test.json").read_text())["versions"]
    connector = versions["spark-sql-kafka"]
    assert versions["pyspark"] == SPARK_35 and jars.major_minor(connector) == (3, 5), versions
    driver_log = (tmp_path / "latest" / "logs" / "driver-1.log").read_text()
    assert f"files_job: Spark {SPARK_35}, Kafka connector spark-sql-kafka-0-10_2.12-{connector}.jar" in driver_log, \
        driver_log[-2000:]
    assert naive["verdict"] == "invalid" and naive["counts"]["duplicate"] > 0, _why(naive, out)
    fs = naive["file_sink"]
    assert fs["read"] == "listing (no log)" and fs["committed_records"] > naive["stats"]["input_records"], fs
    assert ev["output_end_at_kill"]["0"] > ev["output_end_at_offsets_logged"]["0"], ev  # the batch's files landed


@pytest.mark.timeout(1200)
def test_a_users_iceberg_merge_job_on_spark_3_5_is_valid(warm_cluster, tmp_path):
    """The job takes its catalog from ``{iceberg_conf}`` and its table from ``{output_table}``, and runs on
    PySpark 3.5 (``--pipeline-python``), whose ``{jars}`` carry Iceberg's runtime built for Spark 3.5
    (Scala 2.12)."""
    from onceproof.backends.local import runtimes

    rt = runtimes.ensure(SPARK_35)
    ok, ev, out = _run(tmp_path, "iceberg", "", ("--pipeline-python", str(rt.python), *warm_cluster))
    assert ok["verdict"] == "valid", _why(ok, out)
    ic = ok["iceberg"]
    assert ic["rows"] == ok["stats"]["input_records"] > 0 and ic["snapshots"] > 1, ic
    assert ev["output_end_at_kill"]["0"] > ev["output_end_at_offsets_logged"]["0"], ev  # the batch's snapshot
    assert "iceberg table read at snapshot" in out, out[-3000:]
    driver_log = (tmp_path / "latest" / "logs" / "driver-1.log").read_text()
    assert f"iceberg_job: pyspark {SPARK_35}; Iceberg in --jars: iceberg-spark-runtime-3.5_2.12-" in driver_log, \
        driver_log[-2000:]


@pytest.mark.extended  # 82 s; make test's 50 minutes: the bundled iceberg-no-idempotence is caught
@pytest.mark.timeout(1200)  # there (tests/cluster/test_iceberg_sink.py)
def test_a_users_iceberg_append_job_is_invalid_with_duplicate_rows(tmp_path):
    from onceproof.backends.local import runtimes
    from onceproof.sinks.iceberg import RUNTIME

    rt = runtimes.ensure(RUNTIME)
    naive, _, out = _run(tmp_path, "iceberg", " --naive", ("--pipeline-python", str(rt.python)))
    assert naive["verdict"] == "invalid" and naive["counts"]["duplicate"] > 0, _why(naive, out)
    assert naive["iceberg"]["rows"] > naive["stats"]["input_records"], naive["iceberg"]
