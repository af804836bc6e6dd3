"""``onceproof check --engine spark``: the checks of ``checking/checks.py`` as Spark jobs, on whatever
Spark master is configured, so that a run too large for one machine's memory (a long soak) is checked
on a cluster.

Where the records come from:

* a stored run directory: its parquet snapshots (``input.parquet``, ``output.parquet``,
  ``output_uncommitted.parquet``, ``live.parquet``; ``store/spark_readers.py``) and ``history.jsonl``;
* a run directory without snapshots, given ``--bootstrap``: the topics, read with Spark's Kafka batch
  source at ``read_committed`` (``clients/spark_topics.py``), saved into the run directory as parquet
  (a directory of part files per snapshot, which both engines read), then checked;
* ``check --bootstrap`` (live): the same read into the new run directory, after the caught-up wait.

What is checked is ``onceproof.checking.checks.check_saved`` / ``check_live``'s composition: the keyed workload's
exactly-once checker (``checking/spark/engine.py``), the transaction checks
(``checking/spark/transactions.py`` through ``checkers/compose.py``), the faults near each example
(``checkers/nearby.py`` on the example rows only), the history's completeness and the nemesis coverage.
The result dict is the pandas engine's (``tests/test_spark_engine.py``), so ``results.json``, the
report and the exit code follow unchanged. The small run files (``test.json``, ``recovery.json``,
``sink.jsonl``, ``nemesis.jsonl``) are read in the driver, as the pandas engine reads them.

Refused (:meth:`SparkEngine.refusal`, a usage error naming ``--engine pandas``): the counter workload
(its checker judges each key's aggregates against input prefixes, not ported) and runs of a sink that
writes a directory (``--sink file``: read through ``_spark_metadata``, ``sinks/file_log.py``).

On a cluster master every executor must see the run directory (a shared filesystem), since the
snapshots are read and written by the executors.
"""

from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path

import pandas as pd
import psutil
import pyarrow.parquet as pq

from onceproof.checkers import advice, nearby
from onceproof.checkers.exactly_once import Recovery
from onceproof.checking import checks as checking
from onceproof.checking.checks import CheckError
from onceproof.checking.spark import engine as spark_engine
from onceproof.checking.spark import transactions as spark_transactions
from onceproof.checking.spark.engine import columns
from onceproof.nemesis import coverage
from onceproof.nemesis.delete_records import DeleteInputRecords
from onceproof.sinks import user_outputs
from onceproof.store import readers, spark_readers
from onceproof.store.runfiles import INPUT, OUTPUT, RunFiles, stored

DEFAULT_MASTER = "local[2]"
KEYED = "keyed"


# ------------------------------------------------------------------------------------------- session


def driver_memory(total_bytes: int | None = None) -> str:
    """``spark.driver.memory`` for a local master when none is configured: a quarter of the machine's
    RAM, at least 1 GiB and at most 16 GiB (a local master's tasks run in the driver's JVM)."""
    if total_bytes is None:

        total_bytes = psutil.virtual_memory().total
    gib = max(1, min(16, total_bytes // 4 // (1 << 30)))
    return f"{gib}g"


@contextlib.contextmanager
def session(master: str = DEFAULT_MASTER, conf: dict[str, str] | None = None, kafka: bool = False):
    """A SparkSession for checking: the active one when this process already has one (left running;
    ``master`` and ``conf`` then do not apply), else a new one on ``master`` with ``conf`` (stopped on
    exit). A new session on a local master gets :func:`driver_memory` unless ``conf`` sets it, no UI and
    no console progress bars; ``kafka`` adds the Kafka connector's jars (``onceproof deps`` resolves
    them).

    Raises: ``onceproof.backends.common.jars.ResolveError`` when ``kafka`` and the jars cannot be resolved.
    """
    # pyspark: only where Spark runs; this module is imported on the harness side too, which needs no Spark
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    conf = dict(conf or {})
    b = SparkSession.builder.master(master).appName("onceproof-check")
    defaults = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
    if master.startswith("local"):
        defaults["spark.driver.memory"] = driver_memory()
    if kafka:
        # lazy: the connector's jars only for a session that reads Kafka
        from onceproof.backends.common.jars import spark_kafka_classpath

        jars = [str(j) for j in spark_kafka_classpath().jars]
        defaults["spark.jars"] = ",".join(filter(None, [conf.pop("spark.jars", ""), *jars]))
    for k, v in {**defaults, **conf}.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("ONCEPROOF_SPARK_LOG_LEVEL", "ERROR"))
    try:
        yield spark
    finally:
        spark.stop()


# ------------------------------------------------------------------------------------------- engine


class SparkEngine:
    """The ``spark`` entry of ``checking/engines.py``."""

    name = "spark"
    summary = "Spark jobs on --spark-master (parquet snapshots, or the topics at read_committed)"
    reads_topics_for_run_dir = True

    def refusal(self, run_dir: Path | None, *, workload: str = KEYED, file_sink: Path | None = None,
                file_read: str = "committed", **_) -> str | None:
        """Why this engine cannot check the run (one line naming the fix), or ``None``."""
        fix = "check it with --engine pandas (the default)"
        if run_dir is not None:
            config = ((readers.read_or_none(readers.read_test, run_dir) or {}).get("config") or {})
            workload = str(config.get("workload") or KEYED)
            sink = user_outputs.entry_of(config)
            if sink is not None and sink.output_dir:
                return (f"{run_dir} is a --sink {sink.name} run: --engine spark reads topic snapshots, not a "
                        f"{sink.name} sink's directory; {fix}")
            if any(str(s).startswith(DELETE_RECORDS) for s in config.get("nemesis") or []):
                return (f"{run_dir} ran {DELETE_RECORDS}: --engine spark does not yet rebuild the deleted input "
                        f"records from the history; {fix}")
        if workload != KEYED:
            return f"--engine spark checks the keyed workload only, not {workload}; {fix}"
        if file_sink is not None or file_read != "committed":
            return f"--engine spark does not read file sinks (--file-sink, --file-read); {fix}"
        return None

    def check_saved(self, run_dir: Path, *, file_read: str | None = None, options=None) -> dict:
        o = options
        with session(o.spark_master, o.spark_conf, kafka=bool(o.bootstrap)) as spark:
            return check_run(spark, run_dir, bootstrap=o.bootstrap, input_topic=o.input_topic,
                             output_topic=o.output_topic)

    def check_live(self, bootstrap: str, input_topic: str, output_topic: str, run_dir: Path, st, *,
                   options=None, **_) -> dict:
        o = options
        with session(o.spark_master, o.spark_conf, kafka=True) as spark:
            return check_topics(spark, bootstrap, input_topic, output_topic, run_dir, st)


DELETE_RECORDS = DeleteInputRecords.name

ENGINE = SparkEngine()


# ------------------------------------------------------------------------------------------- checks


def snapshot(spark, run_dir: Path, bootstrap: str, input_topic: str, output_topic: str) -> None:
    """Read both topics with Spark's Kafka source (input and output at read_committed, output at
    read_uncommitted) and save them as the run's parquet snapshots (directories of part files)."""
    # lazy: spark_topics imports pyspark (see session)
    from onceproof.clients import spark_topics

    files = RunFiles(run_dir)
    for path, topic, committed, headers in ((files.input, input_topic, True, False),
                                             (files.output, output_topic, True, True),
                                             (files.output_uncommitted, output_topic, False, True)):
        df = spark_topics.read(spark, bootstrap, topic, committed=committed, headers=headers)
        df.drop(spark_readers.ORD).write.mode("overwrite").parquet(str(path))


def check_run(spark, run_dir: Path, *, bootstrap: str = "", input_topic: str = "input",
              output_topic: str = "output") -> dict:
    """``onceproof.checking.checks.check_saved`` on ``spark``; with ``bootstrap``, a run directory without
    snapshots gets them from the topics first (:func:`snapshot`).

    Raises: ``CheckError`` as ``check_saved`` does (no snapshots and no ``bootstrap``, a damaged file).
    """
    files = RunFiles(run_dir)
    test = checking._read(readers.read_test, run_dir) or {}
    replay = str(test.get("replay") or "")
    missing = [n for n in (INPUT, OUTPUT) if not (files / n).exists()]
    if missing and bootstrap:
        snapshot(spark, run_dir, bootstrap, input_topic, output_topic)
    elif missing:
        err = (readers.read_or_none(readers.read_results, run_dir) or {}).get("error")
        why = f" (its error: {err})" if err else ""
        advice = f"re-run it with `{replay}`" if replay else "nothing was saved to re-check; run the test again"
        raise CheckError(f"{run_dir} has no {', '.join(missing)}: the run ended before its check{why}; {advice}, "
                         "or read its topics with --bootstrap HOST:PORT if they still exist")
    damaged = f"; the run directory is damaged{checking._rerun(replay)}"
    rec, lso, hw = checking.saved_recovery(run_dir)
    result, nem = _checks(spark, run_dir, rec, lso, hw, damaged)
    result["recovery"] = {"finished": rec.finished, "reasons": rec.reasons}
    if checking.workload_ran(run_dir):
        ops = nem.to_dict("records") if len(nem) else []
        result = coverage.judge(result, [tuple(x) for x in test.get("schedule") or []], ops,
                                checking.stored_workload_stop(run_dir))
    return result


def check_topics(spark, bootstrap: str, input_topic: str, output_topic: str, run_dir: Path, st) -> dict:
    """``onceproof.checking.checks.check_live`` on ``spark``: read both topics into ``run_dir``'s snapshots, write
    ``recovery.json``, check. ``st`` is the caught-up wait's ``onceproof.checking.recovery.RecoveryStatus``."""
    snapshot(spark, run_dir, bootstrap, input_topic, output_topic)
    rec = Recovery(finished=st.finished, reasons=list(st.reasons))
    lso, hw, moved = checking.live_offsets(bootstrap, input_topic, output_topic, st)
    checking.save_recovery(RunFiles(run_dir), rec, st, lso, hw)
    result, _ = _checks(spark, run_dir, rec, lso, hw, "")
    result["recovery"] = {"finished": rec.finished, "reasons": rec.reasons, "seconds": st.seconds}
    if moved:
        checking._input_moved(result, moved)
    return result


ROWS_PER_SHUFFLE_PARTITION = 1_000_000


def shuffle_partitions(spark, run_dir: Path) -> int | None:
    """``spark.sql.shuffle.partitions`` for this run, when the session's configuration does not set it:
    one per million output records (from the parquet footers, read in the driver), at least twice the
    default parallelism. Spark's default of 200 costs 2× at 1 M records on 2 cores (198 s against 90 s,
    ``bench/README.md``); ``None`` when configured or when the snapshots are not local files."""


    if spark.sparkContext.getConf().contains("spark.sql.shuffle.partitions"):
        return None
    path = RunFiles(run_dir).output
    try:
        files = [path] if path.is_file() else sorted(path.glob("*.parquet"))
        rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    except (OSError, ValueError):
        return None
    return max(2 * spark.sparkContext.defaultParallelism, math.ceil(rows / ROWS_PER_SHUFFLE_PARTITION))


def _checks(spark, run_dir: Path, rec: Recovery, lso, hw, damaged: str) -> tuple[dict, pd.DataFrame]:
    """The composition of ``onceproof.checking.checks.run_checks`` plus the history's completeness, on the run's
    snapshots: ``(result, nemesis ops)``. Sets :func:`shuffle_partitions` for the duration and drops
    every cached frame at the end."""
    n = shuffle_partitions(spark, run_dir)
    before = spark.conf.get("spark.sql.shuffle.partitions")
    if n is not None:
        spark.conf.set("spark.sql.shuffle.partitions", str(n))
    try:
        return _compose(spark, run_dir, rec, lso, hw, damaged)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)
        spark.catalog.clearCache()  # the parsed history (store/spark_readers.py) and anything left


def _compose(spark, run_dir: Path, rec: Recovery, lso, hw, damaged: str) -> tuple[dict, pd.DataFrame]:
    def load(reader):
        try:
            return reader(spark, run_dir)
        except readers.DamagedFile as e:
            raise CheckError(f"{e}{damaged}") from e

    inp, out = load(spark_readers.input), load(spark_readers.output)
    unc, live = load(spark_readers.output_uncommitted), load(spark_readers.live)
    problems: list[str] = []
    try:
        hist = spark_readers.history(spark, run_dir, problems)
    except readers.DamagedFile as e:
        raise CheckError(str(e)) from e
    nem = checking._read(readers.read_nemesis, run_dir, problems)
    base = spark_engine.check(hist, inp, out, rec)
    base["workload"] = KEYED
    result = spark_transactions.combine(base, output=out, sink_log=checking._sink_log(run_dir), uncommitted=unc,
                                        live=live, lso=lso, hw=hw,
                                        live_check=checking.stored_liveness(run_dir, nem),
                                        strict=bool(checking._config(run_dir).get("strict")))
    result = advice.attach(attach_nearby(result, out, inp, nem))
    if problems:
        result.setdefault("warnings", []).extend(problems)
    if checking.workload_ran(run_dir):
        gaps = history_gaps(RunFiles(run_dir).history, hist, inp)
        if gaps:
            checking._history_unknown(result, gaps)
    return result, nem


def attach_nearby(result: dict, output, input, ops: pd.DataFrame | None) -> dict:
    """``onceproof.checkers.nearby.attach`` with only the example records' rows of ``output`` / ``input`` brought to
    the driver (nearby looks up just those)."""
    if nearby.fault_windows(ops).empty:
        return result
    places = set()
    for lst in result.get("anomalies", {}).values():
        for ex in lst:
            if not isinstance(ex, dict):
                continue
            if "input_partition" in ex:
                places.add((int(ex["input_partition"]), int(ex["input_offset"])))
            for c in ex.get("copies") or []:
                if "offset" in c:
                    places.add((int(c["partition"]), int(c["offset"])))
            if "partition" in ex and "offset" in ex:
                places.add((int(ex["partition"]), int(ex["offset"])))
    return nearby.attach(result, _rows_at(output, places), _rows_at(input, places), ops)


def _rows_at(frame, places: set[tuple[int, int]]) -> pd.DataFrame | None:
    """The rows of ``frame`` at ``places`` ((partition, offset)), with their timestamp, in row order."""
    # pyspark: only where Spark runs; this module is imported on the harness side too, which needs no Spark
    from pyspark.sql import functions as F

    if frame is None or "timestamp" not in columns(frame) or not places:
        return None
    want = frame.sparkSession.createDataFrame(sorted(places), "partition long, offset long")
    f = frame.select(F.col("partition").cast("long").alias("partition"), F.col("offset").cast("long").alias("offset"),
                     "timestamp", spark_readers.ORD)
    return spark_transactions.to_pandas(f.join(F.broadcast(want), ["partition", "offset"]).orderBy(spark_readers.ORD)
                                        .drop(spark_readers.ORD))


def history_gaps(path: Path, hist, inp) -> list[str]:
    """``onceproof.checking.checks.history_gaps`` on Spark frames (the same reasons, word for word)."""
    # pyspark: only where Spark runs; this module is imported on the harness side too, which needs no Spark
    from pyspark.sql import functions as F

    why = "acknowledged sends could not be checked against the input (lost-write)"
    path = stored(path)
    if not path.exists():
        return [f"{path.name} is missing: {why}"]
    c = F.col
    h = hist.agg(F.count(F.lit(1)).alias("n"), *[F.count(c(n)).alias(n) for n in ("type", "key", "seq")]).crossJoin(
        inp.agg(F.count(F.lit(1)).alias("n_in"))).first()
    if not h["n"]:
        return [f"{path.name} is empty: {why}"]
    if not h["n_in"] or not all(h[n] for n in ("type", "key", "seq")):
        return [] if not h["n_in"] else [f"{path.name} has no send ops: {why}"]
    inv = hist.where((c("type") == "invoke") & (c("f") == "send"))
    top = inv.groupBy(spark_engine._key_plain(inv).alias("_k")).agg(F.max(c("seq").try_cast("double")).alias("_top"))
    seq_in = c("seq").try_cast("double")
    j = inp.select(c("key"), c("seq"), spark_readers.ORD, spark_engine._key(inp).alias("_k")).join(top, "_k", "left")
    beyond = j.where(seq_in.isNotNull() & (c("_top").isNull() | (seq_in > c("_top"))))
    b = beyond.agg(F.count(F.lit(1)).alias("n"),
                   F.min_by(F.struct("key", "seq"), c(spark_readers.ORD)).alias("first")).first()
    n = b["n"]
    if not n:
        return []
    first = b["first"]
    key = first["key"] if first["key"] is not None else spark_engine.NA_KEY
    return [f"{path.name} ends before the input does: {n} input records (e.g. key {key} seq "
            f"{first['seq']}) have no send in it, so it was cut short and {why.split(' could')[0]} could "
            "not all be checked (lost-write)"]
