"""The system under test: a PySpark Structured Streaming job, Kafka → map → Kafka.

Run as ``python -m onceproof.job --bootstrap ... --sink eos|at-least-once`` (the harness's supervisor
does, and restarts it from the same checkpoint when it dies).

Source: Spark's Kafka source on the input topic, ``kafka.isolation.level=read_committed``,
``startingOffsets=earliest``, ``failOnDataLoss=true``, at most ``--max-offsets`` records per micro-batch.
Transform: the workload's (``--workload``, ``workloads/registry.py``): ``keyed`` keeps the Kafka key and
the JSON value's ``key`` and ``seq`` and adds the input partition/offset and append time; ``counter``
keeps a running count and sum per key in Spark state (update mode). Sink: the ``--sink`` entry's writer
(``sinks/registry.py``): ``eos`` (the transactional sink, docs/architecture.md, "The exactly-once
sink"), its mutants, ``at-least-once`` (Spark's own Kafka writer) or ``file`` (Spark's file sink).

Identity: the sink id (prefix of every transactional.id and marker group) defaults to one stored in the
checkpoint (``default_sink_id``), so a fresh checkpoint on a reused cluster never inherits the markers of
an older query. The driver incarnation (``ONCEPROOF_DRIVER_INCARNATION``, set by the harness's
supervisor per driver process) goes into every ``sink.jsonl`` event and the ``op.incarnation`` header.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from onceproof import kafka_config
from onceproof.pipeline import hooks, mutants
from onceproof.pipeline.identity import (  # noqa: F401
    DRIVER_CLOCK_ENV,
    INCARNATION_ENV,
    SINK_ID_FILE,
    SPARK_CDS_ENV,
    default_sink_id,
    driver_incarnation,
    input_partitions,
)
from onceproof.pipeline.jvm import spark_java_options
from onceproof.sinks import registry as sinks
from onceproof.sinks.base import JobContext
from onceproof.workloads import registry

SINKS = tuple(sinks.names())  # sinks/registry.py: each sink's entry (the eos-* ones are mutants)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="onceproof.job", description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers host:port[,...]")
    ap.add_argument("--input-topic", default="input")
    ap.add_argument("--output-topic", default="output")
    ap.add_argument("--progress-topic", default="output-progress")
    ap.add_argument("--sink", choices=SINKS, default=sinks.DEFAULT)
    ap.add_argument("--sink-id", default=None,
                    help="transactional.id / marker group prefix (default: the one stored in the checkpoint, "
                         f"<checkpoint>/{SINK_ID_FILE}, created as onceproof-<sink>-<random hex>)")
    ap.add_argument("--checkpoint", required=True, help="Spark checkpoint directory")
    ap.add_argument("--master", default="local-cluster[2,1,1024]")
    ap.add_argument("--jars", default="", help="comma-separated jars (Spark's Kafka connector)")
    ap.add_argument("--trigger-ms", type=int, default=1000, help="processing-time trigger, ms")
    ap.add_argument("--max-offsets", type=int, default=5000, help="maxOffsetsPerTrigger, records")
    ap.add_argument("--min-partitions", type=int, default=None,
                    help="minPartitions of the Kafka source (default: one Spark partition per Kafka partition)")
    ap.add_argument("--txn-timeout-ms", type=int, default=60000)
    ap.add_argument("--control-dir", default="", help="fault-hook control directory")
    ap.add_argument("--sink-log", default="", help="append sink transaction events here (JSON lines)")
    ap.add_argument("--file-sink-path", default="", help="--sink file: the output directory (JSON lines and "
                                                          "its _spark_metadata log)")
    ap.add_argument("--database-dsn", default="", help="a sink that writes a database: its libpq connection "
                                                       "string (the table is named like --output-topic)")
    ap.add_argument("--workload", choices=registry.names(), default=registry.DEFAULT,
                    help="the transform between source and sink: the workload's (workloads/registry.py)")
    ap.add_argument("--input-contiguous", action=argparse.BooleanOptionalAction, default=True,
                    help="the input topic has no transactional writes, so each batch's planned offset range "
                         "must arrive complete; the eos sink refuses an incomplete batch (see "
                         "pipeline/completeness.py). Turn off for a transactional input topic")
    ap.add_argument("--pool-size", type=int, default=None,
                    help="lower bound on the transactional-id pool fenced at start; the pool is the input "
                         "topic's partition count read from Kafka (the larger of the two when given)")
    ap.add_argument("--input-wait-s", type=float, default=180.0,
                    help="how long to wait for the input topic at start (the harness starts the driver "
                         "while the brokers start), s")
    return ap.parse_args(argv)


def resolve_sink_id(args: argparse.Namespace) -> str:
    """``--sink-id`` when given, else ``default_sink_id(<checkpoint>, "onceproof-<sink>")``."""
    return args.sink_id or default_sink_id(Path(args.checkpoint), f"onceproof-{args.sink}")


def pool_size(args: argparse.Namespace, timeout_s: float = 30.0) -> int:
    """Size of the transactional-id pool to settle at query start: the input topic's partition count
    from Kafka's metadata now (``input_partitions``), raised to ``--pool-size`` when that is larger
    (fencing an unused id costs one ``init_transactions()``; missing one leaves its open transaction
    pinning the output's LSO). Raises as ``input_partitions`` does."""
    return max(input_partitions(args.bootstrap, args.input_topic, timeout_s=timeout_s), args.pool_size or 0)


STOP_TIMEOUT_S = 60
"""``spark.sql.streaming.stopTimeout``: how long ``query.stop()`` waits for the query's micro-batch
thread to end (Spark cancels the running batch's jobs and interrupts the thread, then waits; the default
0 waits for ever). Past it ``stop()`` raises and :func:`await_query` records the error."""
REDACT_JAAS = r'(?i)password\s*=\s*"[^"]*"'
"""``spark.redaction.string.regex`` with SASL: Spark redacts what matches in plan strings and the UI (the
JAAS line of ``kafka.sasl.jaas.config``, whose key the default ``spark.redaction.regex`` does not match;
Spark's configuration page, "spark.redaction.string.regex")."""


def wait_for_input(args: argparse.Namespace, timeout_s: float, poll_s: float = 0.5,
                   clock=time.monotonic, sleep=time.sleep) -> int:
    """Wait until the input topic exists and answers with its partitions, then return :func:`pool_size`.

    The harness starts the driver while the brokers are still starting (``onceproof.backends.base.SparkApp.
    starts_before_cluster``), so the first looks may find no broker or no topic yet; it asks every
    ``poll_s`` seconds (each look bounded by 5 s) for up to ``timeout_s`` seconds.

    Raises: what the last look raised (``RuntimeError`` for a topic without partition metadata,
    ``KafkaException`` for a cluster that does not answer) once ``timeout_s`` has passed.
    """
    deadline = clock() + timeout_s
    while True:
        try:
            return pool_size(args, timeout_s=5.0)
        except Exception:  # noqa: BLE001 - re-raised at the deadline; until then the cluster may be starting
            if clock() >= deadline:
                raise
        sleep(poll_s)


WARM_UP_TIMEOUT_S = 180
"""The longest the warm-up micro-batch may take, s (executors that never register: the driver fails and
its supervisor restarts it)."""


def warm_up(spark, slots: int) -> float:
    """Run one warm-up micro-batch before the pipeline's query starts, so its first micro-batch does not
    pay for start-up and the workload (which waits for ``driver.ready``) starts after it.

    The micro-batch is a throwaway streaming query's: Spark's ``rate-micro-batch`` source (``slots``
    rows in ``slots`` partitions; it supports ``Trigger.AvailableNow``, so exactly one micro-batch runs),
    a ``foreachBatch`` body like the sinks' and a checkpoint in a temporary directory, removed after.
    Its rows go through ``_warm_task`` on the executors. So it waits for the executors to register,
    starts the streaming machinery (the micro-batch loop, the offset and commit logs, the Python
    ``foreachBatch`` callback server), forks the executors' Python workers
    (``spark.python.worker.reuse`` keeps them for the sink's tasks) and imports the sink's modules
    there. It writes to no topic and needs no Kafka, so it runs while the brokers start. It is not a
    micro-batch of the pipeline's own query: that would read the input and write the output the
    checker reads. A driver killed during it leaves that checkpoint (a few KiB) in the temp directory.
    Returns its wall time, s.

    Measured on 2 cores: the first micro-batch after a driver start took 10-18 s (executor launch,
    Python worker fork, imports) before any warm-up, against 0.2-0.8 s for the later ones
    (``sink.jsonl``). The warm-up micro-batch takes about 4 s on a new session (0.3 s on a warm one),
    no longer than the batch job it replaced: ``driver.ready``'s ``warm_up_s`` (with the source's
    warm-up) 6.3 and 6.0 s against 6.1 s, and the pipeline's first sink task began 2.1 and 2.6 s after
    ``driver.ready`` against 2.6 s (``onceproof run --sink eos --nemesis none --time-limit 20 --seed
    1``; one to two runs each, so only "no worse").

    Raises: ``RuntimeError`` when it does not end within :data:`WARM_UP_TIMEOUT_S`; what
    ``awaitTermination`` raises when it fails (``StreamingQueryException``)."""
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="onceproof-warm-up-") as ckpt:
        query = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", slots)
                 .option("numPartitions", slots).load()
                 .writeStream.foreachBatch(_warm_batch).option("checkpointLocation", ckpt)
                 .trigger(availableNow=True).queryName("onceproof-warm-up").start())
        try:
            if not query.awaitTermination(WARM_UP_TIMEOUT_S):
                raise RuntimeError(f"the warm-up micro-batch did not end within {WARM_UP_TIMEOUT_S} s: are the "
                                   "Spark workers up? (see the master's and workers' logs)")
        finally:
            query.stop()
    return round(time.monotonic() - t0, 3)


def _warm_batch(batch_df, batch_id: int) -> list[int]:
    """The warm-up micro-batch's ``foreachBatch`` body: its rows through ``_warm_task`` on the executors;
    the rows each task saw."""
    return batch_df.rdd.mapPartitions(_warm_task).collect()


def warm_up_source(spark, args: argparse.Namespace, transform) -> float:
    """Plan and run, as a batch query, what every micro-batch runs first: Spark's Kafka source on the
    input topic at read_committed, the workload's ``transform`` and a count. The first micro-batch after a
    driver start otherwise pays for loading and planning these in the driver (about 5 s of its 10-15 s,
    executor logs). Returns its wall time, s.

    It reads each partition's head only (:func:`warm_up_offsets`, at most :data:`WARM_RECORDS` records):
    a restarted driver's input holds the whole run so far, which the count read for 9.5 s in a default
    run's restart (``driver.apps.jsonl``'s ``warm_up_source_s``). Its polls wait at most
    :data:`WARM_POLL_MS`: an input written in transactions ends each partition with a commit marker, and
    once the workload has stopped a read_committed poll there returns no record until its timeout
    (``spark.network.timeout``, 60 s here: a restarted driver's warm-up once took 56 s). A warm-up that
    fails so is only a warm-up: it is skipped."""
    t0 = time.monotonic()
    start, end = warm_up_offsets(args.bootstrap, args.input_topic)
    src = (spark.read.format("kafka").options(**kafka_config.spark_options(args.bootstrap))
           .option("subscribe", args.input_topic).option("startingOffsets", start)
           .option("endingOffsets", end).option("kafka.isolation.level", "read_committed")
           .option("kafkaConsumer.pollTimeoutMs", str(WARM_POLL_MS)).load())
    try:
        transform(src).count()
    except Exception as e:  # noqa: BLE001 - a warm-up only: the query plans and reads for itself
        print(f"warm-up read of the input skipped ({type(e).__name__})", flush=True)
    return round(time.monotonic() - t0, 3)


WARM_POLL_MS = 2000
"""How long one poll of :func:`warm_up_source` may wait, ms."""
WARM_RECORDS = 50
"""The most offsets per input partition :func:`warm_up_source` reads."""


def warm_up_offsets(bootstrap: str, topic: str, records: int = WARM_RECORDS,
                    timeout_s: float = 5.0) -> tuple[str, str]:
    """``(startingOffsets, endingOffsets)`` for Spark's Kafka source that cover each partition's first
    ``records`` offsets from its log start (fewer where the partition holds fewer): JSON
    ``{"<topic>": {"<partition>": offset}}``, from the watermarks. ``("earliest", "latest")`` when the
    watermarks cannot be read within ``timeout_s`` seconds (each). Raises nothing from Kafka."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    try:
        c = Consumer(kafka_config.client_config(bootstrap, {"group.id": "onceproof-warm-up", "log_level": 3}))
        try:
            t = c.list_topics(topic, timeout=timeout_s).topics.get(topic)
            parts = sorted(t.partitions) if t is not None and t.error is None else []
            marks = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s) for p in parts}
        finally:
            c.close()
    except KafkaException:
        return "earliest", "latest"
    if not marks or any(m is None for m in marks.values()):
        return "earliest", "latest"
    return (json.dumps({topic: {str(p): lo for p, (lo, _) in marks.items()}}),
            json.dumps({topic: {str(p): min(lo + records, hi) for p, (lo, hi) in marks.items()}}))


def _warm_task(it):
    import confluent_kafka  # noqa: F401 - the import is the warm-up

    from onceproof.pipeline import eos_sink, transactional_sink  # noqa: F401

    yield sum(1 for _ in it)


def clock_env(env) -> None:
    """Move ``DRIVER_CLOCK_ENV``'s variables into ``env`` (``os.environ``: what the JVM that PySpark
    starts inherits); nothing when it is unset."""
    raw = env.pop(DRIVER_CLOCK_ENV, "")
    if raw:
        env.update(json.loads(raw))


def executor_preload(env) -> dict[str, str]:
    """``{"spark.executorEnv.LD_PRELOAD": ...}`` without libfaketime when this driver runs under it (a
    ``driver-clock-skew`` run, ``backends/common/faketime.py``), else ``{}``: the driver's clock is the one
    skewed, while its executors (which inherit its environment through ``local-cluster``'s in-process workers)
    keep the real clock. Pure."""
    preload = env.get("LD_PRELOAD", "")
    if "libfaketime" not in preload:
        return {}
    return {"spark.executorEnv.LD_PRELOAD": " ".join(p for p in preload.split() if "libfaketime" not in p)}


def class_sharing(env) -> dict[str, list[str]]:
    """The class-data sharing options the backend gave this driver for its JVM and its executors'
    (:data:`SPARK_CDS_ENV`, ``backends/local/spark_cds.py``): ``{"driver": [...], "executor": [...]}``,
    ``{}`` when unset or unreadable. Pure."""
    try:
        got = json.loads(env.get(SPARK_CDS_ENV) or "{}")
    except ValueError:
        return {}
    return {k: [str(o) for o in v] for k, v in got.items() if isinstance(v, list)} if isinstance(got, dict) else {}


def build_spark(args: argparse.Namespace, partitions: int, conf: dict[str, str] | None = None):
    """The driver's SparkSession on ``args.master`` (``partitions`` shuffle partitions, changeable until
    the query starts with ``spark.conf.set``), with ``conf`` (the workload's and the sink's settings) on
    top of the harness's defaults."""
    # pyspark: only where Spark runs; this module is imported on the harness side too, which needs no Spark
    from pyspark.sql import SparkSession

    clock_env(os.environ)  # the JVM started below, and only it, under libfaketime in a driver-clock-skew run

    b = (SparkSession.builder.appName(f"onceproof-{args.sink}").master(args.master)
         .config("spark.ui.enabled", "false")
         .config("spark.executor.memory", "640m")
         .config("spark.driver.memory", "768m")
         .config("spark.task.maxFailures", "8")
         .config("spark.sql.shuffle.partitions", str(partitions))
         .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
         .config("spark.sql.streaming.stopTimeout", str(STOP_TIMEOUT_S * 1000))
         .config("spark.network.timeout", "60s")
         .config("spark.executor.heartbeatInterval", "5s")
         .config("spark.deploy.maxExecutorRetries", "1000")
         .config("spark.python.worker.reuse", "true"))
    jopts = spark_java_options(os.environ)  # pipeline/jvm.py: C1-only JIT, serial GC
    share = class_sharing(os.environ)
    for side in ("driver", "executor"):
        opts = " ".join([jopts, *share.get(side, [])]).strip()
        if opts:
            b = b.config(f"spark.{side}.extraJavaOptions", opts)
    if args.jars:
        b = b.config("spark.jars", args.jars)
    for k, v in (conf or {}).items():  # the workload's (e.g. its state store provider)
        b = b.config(k, v)
    for k, v in executor_preload(os.environ).items():
        b = b.config(k, v)
    if kafka_config.current().sasl:  # the JAAS line is an option value, which spark.redaction.regex (keys) misses
        b = b.config("spark.redaction.string.regex", REDACT_JAAS)
    return b.getOrCreate()


def await_query(query, control: hooks.ControlDir, incarnation: str, poll_s: float = 1.0) -> int:
    """Wait for ``query`` (a started ``StreamingQuery``) to end, or stop it when the harness asks.

    Every ``poll_s`` seconds (``query.awaitTermination(poll_s)``) it looks for a stop request naming this
    driver incarnation (:meth:`hooks.ControlDir.stop_requested`, ``<control>/driver-stop.json``, written
    by ``upgrade:graceful``). On one it writes ``driver-stopped.json`` with ``stage="stopping"``, calls
    ``query.stop()`` (which cancels the running micro-batch and waits up to :data:`STOP_TIMEOUT_S` for
    its thread) and writes ``driver-stopped.json`` again: ``stage="stopped"``, ``stop_s`` (seconds
    ``stop()`` took), ``error`` (``None``, or what ``stop()`` raised).

    Returns the process's exit code: 0 when the query ended on its own or was stopped, 1 when
    ``stop()`` raised. Either way the driver exits and its supervisor restarts it from the checkpoint.
    Raises what ``awaitTermination`` raises for a query that failed (``StreamingQueryException``).
    """
    while not query.awaitTermination(poll_s):
        if not control.stop_requested(incarnation):
            continue
        control.mark_stopped(incarnation, stage="stopping")
        t0, error = time.monotonic(), None
        try:
            query.stop()
        except Exception as e:  # noqa: BLE001 - recorded for the harness; the process exits either way
            error = f"{type(e).__name__}: {e}"
        control.mark_stopped(incarnation, stage="stopped", stop_s=round(time.monotonic() - t0, 3), error=error)
        print(f"query stopped on request ({'ok' if error is None else error})", flush=True)
        return 0 if error is None else 1
    return 0


def read_source(spark, args: argparse.Namespace, max_offsets: int, min_partitions):
    """The input as a streaming frame: Spark's Kafka source on ``--input-topic`` at read_committed (a
    mutant's: ``pipeline/mutants.py`` ``source_isolation``) from the earliest offset, failing on data
    loss, at most ``max_offsets`` records per micro-batch, with ``minPartitions`` when ``min_partitions``
    is set."""
    src = (spark.readStream.format("kafka")
           .options(**kafka_config.spark_options(args.bootstrap))
           .option("subscribe", args.input_topic)
           .option("startingOffsets", "earliest")
           .option("failOnDataLoss", "true")
           .option("kafka.isolation.level", mutants.source_isolation(args.sink))
           .option("maxOffsetsPerTrigger", str(max_offsets)))
    if min_partitions:
        src = src.option("minPartitions", str(int(min_partitions)))
    return src.load()


def main(argv: list[str] | None = None) -> int:
    t_main = time.monotonic()
    args = parse_args(argv)
    # the cluster's security from the environment the backend gave the driver (PLAINTEXT when none)
    kafka_config.configure(kafka_config.from_environment())
    sink = sinks.get(args.sink)
    sink_id = resolve_sink_id(args)
    incarnation = driver_incarnation()
    workload = registry.get(args.workload)
    # Spark first, then Kafka: the session, its executors and the warm-up need no broker, and the harness
    # starts the brokers meanwhile; shuffle partitions are set once the input's partition count is known
    spark = build_spark(args, args.pool_size or 1, {**workload.spark_conf, **sink.spark_conf})
    spark.sparkContext.setLogLevel("WARN")
    t_start = time.monotonic()
    session_s = round(t_start - t_main, 3)
    warm_s = warm_up(spark, spark.sparkContext.defaultParallelism)
    pool = wait_for_input(args, args.input_wait_s)
    spark.conf.set("spark.sql.shuffle.partitions", str(pool))
    source_s = warm_up_source(spark, args, workload.transform)
    warm_s += source_s
    control = hooks.ControlDir(args.control_dir)
    overrides = hooks.driver_overrides(args.control_dir)  # a restart with changed options (nemesis/upgrade.py)
    max_offsets = int(overrides.get("max_offsets") or args.max_offsets)
    min_partitions = overrides.get("min_partitions", args.min_partitions)
    df = workload.transform(read_source(spark, args, max_offsets, min_partitions))
    job = JobContext(args=args, sink=sink, sink_id=sink_id, incarnation=incarnation, pool=pool, control=control,
                     workload=workload)
    query = sink.writer(df, job)
    control.mark_ready({"query_id": str(query.id), "run_id": str(query.runId), "sink": args.sink,
                        "app_id": spark.sparkContext.applicationId, "sink_id": sink_id,
                        "incarnation": incarnation, "pool_size": pool, "overrides": overrides,
                        "max_offsets": max_offsets, "min_partitions": min_partitions,
                        "pyspark": spark.version, "warm_up_s": warm_s, "warm_up_source_s": source_s,
                        "session_s": session_s, "session_to_query_s": round(time.monotonic() - t_start, 3)})
    print(f"query {query.id} started, sink={args.sink}, sink_id={sink_id}, incarnation={incarnation}, "
          f"pool={pool}", flush=True)
    return await_query(query, control, incarnation)

if __name__ == "__main__":
    sys.exit(main())
