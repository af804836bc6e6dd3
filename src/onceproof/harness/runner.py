"""The test runner: setup → run → heal → recover → check → teardown (Jepsen's ``jepsen.core/run!``).

It only sequences phases. What runs where is the backend's (``backends/``, chosen by ``--backend``):
the cluster, the supervised pipeline and the fault network are entered through the backends' protocols
(``backends/base.py``), each with its teardown step on one ``ExitStack`` (``harness/teardown.py``).

Teardown runs on every exit path (normal, exception, Ctrl-C): faults are healed, the driver with
everything it started and every broker are killed, so no JVM outlives the run. It is bounded by
``TEARDOWN_BOUND_S`` seconds.

Exit codes (Jepsen's): 0 valid, 1 invalid, 2 unknown, 255 crashed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import signal
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import confluent_kafka
import pyarrow as pa
import pyarrow.parquet as pq
from rich.console import Console

from onceproof import kafka_config
from onceproof.backends.base import (
    Backend,
    Cluster,
    ClusterShape,
    Database,
    FaultNetwork,
    ForeignCluster,
    PipelineArgs,
    RunResources,
    SparkApp,
)
from onceproof.backends.common import interpreter, jars, reaper, spark_release
from onceproof.checkers import platform as platform_findings
from onceproof.checking import checks as checking
from onceproof.checking import recovery
from onceproof.clients import durability, topics
from onceproof.clients.live_reader import LiveReader
from onceproof.clients.lso_sampler import LsoSampler
from onceproof.harness import signals, warm
from onceproof.harness.config import TestConfig
from onceproof.harness.summary import brief, fault_counts, summarize
from onceproof.harness.teardown import Teardown
from onceproof.harness.warm import WarmCluster
from onceproof.nemesis import catalog, coverage, schedule
from onceproof.nemesis.fault import NemesisContext
from onceproof.nemesis.runner import NemesisRunner
from onceproof.pipeline.identity import default_sink_id
from onceproof.report.html import build_report
from onceproof.report.index import build_index
from onceproof.report.junit import write_junit
from onceproof.sinks.base import DRIVER_HOOKS, JobPlace, OutputLocation
from onceproof.store import checkpoint, retention
from onceproof.store.compact import compact
from onceproof.store.history import HistoryWriter
from onceproof.store.runfiles import RESULTS, TEST, RunFiles
from onceproof.store.runs import RunDir
from onceproof.topic_names import TopicGuard, TopicNames
from onceproof.workloads import producers
from onceproof.workloads import registry as workloads
from onceproof.workloads.base import Client

EXIT = {"valid": 0, "invalid": 1, "unknown": 2, "crashed": 255}
log = logging.getLogger("onceproof.runner")


TOPICS = TopicNames("")
"""The topics of a run on a cluster onceproof owns (local, Docker): ``input``, ``output``,
``output-progress`` (``topic_names``)."""


def pipeline_runtime(cfg: TestConfig, sink) -> str:
    """The PySpark release the pipeline's cached runtime runs (``PipelineArgs.runtime``): ``--spark-version``'s
    (a release by now: :func:`run` turns a line into one), else the sink's own (``Sink.spark_runtime``), else
    ``""`` (the harness's PySpark)."""
    return cfg.spark_version or sink.spark_runtime or ""


def versions(backend: Backend, kafka_version: str = "", kafka_upgrade_to: str = "",
             pipeline_python: str = "", spark_version: str = "") -> dict[str, str]:
    """What the run ran: the backend's versions (Kafka, PySpark, the connector, Java), the brokers'
    ``kafka_version`` when the run chose one (``--kafka-version``), the release ``rolling-upgrade`` moves
    them to (``kafka-upgrade-to``, when asked for: its evidence says whether the roll happened), and the
    harness's own Kafka client and Python. With ``pipeline_python`` (``--pipeline-python``), ``pyspark``
    and ``spark-sql-kafka`` are the job's (its interpreter's PySpark and the connector its ``{jars}``
    carry) and ``harness-pyspark`` is the harness's own; with ``spark_version`` (the PySpark release
    ``--spark-version`` chose), they are that release's and its connector's.

    Raises: ``InterpreterError``, ``jars.ResolveError``."""

    v = confluent_kafka.version()  # a string in 2.16 ("2.16.1"), a (string, int) tuple before
    base = backend.versions()
    chosen = {"kafka": kafka_version} if kafka_version else {}
    if kafka_upgrade_to:
        chosen["kafka-upgrade-to"] = kafka_upgrade_to
    if pipeline_python:
        own = base.get("pyspark", "")
        i = interpreter.probe(os.path.expanduser(pipeline_python))
        chosen.update({"pyspark": i.pyspark_version, "harness-pyspark": own,
                       "spark-sql-kafka": jars.spark_kafka_classpath(i.jars_dir, i.pyspark_version).version})
    elif spark_version:
        chosen.update({"pyspark": spark_version, "harness-pyspark": base.get("pyspark", ""),
                       "spark-sql-kafka": jars.served_connector(spark_version)})
    return {**base, **chosen, "confluent-kafka": v if isinstance(v, str) else v[0],
            "librdkafka": confluent_kafka.libversion()[0], "python": platform.python_version()}


@dataclass
class _Run:
    """One run's state, shared by the phase functions. The backend's services are set as they are built."""

    cfg: TestConfig
    rd: RunDir
    console: Console
    meta: dict
    history: HistoryWriter
    nem_hist: HistoryWriter
    backend: Backend
    cluster: Cluster
    td: Teardown
    timings: dict = field(default_factory=dict)
    net: FaultNetwork | None = None
    spark: SparkApp | None = None
    live: LiveReader | None = None
    lso: LsoSampler | None = None
    workload: Client | None = None
    nem: NemesisRunner | None = None
    db: Database | None = None
    ctx: NemesisContext | None = None
    plan: list = field(default_factory=list)
    health: dict = field(default_factory=dict)
    names: TopicNames = TOPICS
    """The run's topics (:data:`TOPICS` on the local and Docker backends)."""
    warm: WarmCluster | None = None
    """The warm cluster the run leased (``harness/warm.py``): it neither starts nor stops the brokers, it
    deletes its own topics."""

    @property
    def ckpt(self) -> Path:
        return self.rd.checkpoint

    @property
    def sink(self):
        """The entry of what the pipeline writes: its ``--sink`` (``sinks/registry.py``) or, for a
        ``--pipeline-cmd`` job, its ``--output`` (``sinks/user_outputs.py``)."""
        return self.cfg.sink_entry

    @property
    def file_sink(self) -> Path | None:
        """The sink's output directory in the run directory (its entry's ``output_dir``: ``file-sink/``
        for Spark's file sink), ``None`` for a sink that writes a Kafka topic."""
        return self.rd.path / self.sink.output_dir if self.sink.output_dir else None

    @property
    def control(self) -> Path:
        return self.rd.control


def _timed(r: _Run, key: str):
    t = time.monotonic()
    return lambda: r.timings.__setitem__(key, round(time.monotonic() - t, 1))


def _setup(r: _Run) -> None:
    """Fault network (if any), Kafka and topics, the supervised Spark driver. Each resource's teardown is
    registered *before* it starts, so an interrupt in the middle of a start still stops it."""
    cfg, console, td, cluster = r.cfg, r.console, r.td, r.cluster
    if isinstance(r.backend, RunResources):  # pushed first, so it runs after every other step
        td.push("backend resources close", r.backend.close)
    if cfg.proxied and r.warm:  # the owner's proxies: healed at the end, never stopped
        r.net = net = r.warm.network(r.rd.logs)
        td.push("proxy network heal", net.heal)
    elif cfg.proxied:
        r.net = net = r.backend.network(cluster, r.rd.logs)
        td.push("proxy network stop", net.stop)
        td.track(net.kill)
        with console.status("building/starting the fault network (the cluster's proxies)"):
            done = _timed(r, "proxy_start_s")
            net.start()
            done()
        console.print(f"fault network up in {r.timings['proxy_start_s']}s: {net.describe()}")
    if not r.warm:
        td.push("cluster down", cluster.down)
        td.track(cluster.down)
    if r.sink.database:
        _start_database(r)
    pipeline = PipelineArgs(bootstrap=cluster.bootstrap, sink=cfg.sink, checkpoint=r.ckpt, control=r.control,
                            sink_log=r.rd.sink, input_topic=r.names.input, output_topic=r.names.output,
                            progress_topic=r.names.progress, sink_id=r.meta["sink_id"], trigger_ms=cfg.trigger_ms,
                            max_offsets=cfg.max_offsets, txn_timeout_ms=cfg.txn_timeout_ms,
                            pool_size=cfg.partitions, master=cfg.master, command=cfg.pipeline_cmd, cwd=Path.cwd(),
                            workload=cfg.workload, file_sink=r.file_sink,
                            input_contiguous=producers.client_class(cfg.producer).contiguous_input,
                            database_dsn=r.db.job_dsn if r.db else "", python=cfg.pipeline_python,
                            runtime=pipeline_runtime(cfg, r.sink), jars=r.sink.jars,
                            output_values=_output_values(r),
                            clock_file=(r.rd.path / "driver-clock-offset"
                                        if catalog.needs_driver_clock([f for _, f in r.plan]) else None))
    r.spark = spark = r.backend.spark(pipeline, r.rd.logs)
    td.push("driver stop", spark.stop)
    td.track(spark.kill_now)
    what = f"your pipeline: {cfg.pipeline_cmd}" if cfg.pipeline_cmd else f"{cfg.master}, sink={cfg.sink}"
    setup_done = _timed(r, "setup_s")
    # the driver's start-up (JVMs, executors, its warm-up job) overlaps the brokers' when it can wait for
    # its input topic (SparkApp.starts_before_cluster); otherwise it starts once the topics exist
    early = spark.starts_before_cluster
    spark_done = _timed(r, "spark_start_s")
    if early:
        spark.start()
        console.print(f"starting the Spark driver ({what}) while Kafka starts")
    with console.status(f"starting Kafka (KRaft, {cfg.brokers:d} brokers)"):
        done = _timed(r, "cluster_start_s")
        if not r.warm:
            cluster.up()
        weak = durability.get(cfg.cluster_config)
        if (r.warm or isinstance(r.backend, ForeignCluster)) and not cfg.keep_data:  # its own topics, only those
            td.push("delete the run's topics", lambda: topics.delete_topics(cluster.bootstrap, r.names.all()))
        topics.create_topics(cluster.bootstrap, {r.names.input: cfg.partitions, r.names.output: cfg.partitions,
                                                 r.names.progress: 1},
                             replication=weak.replication_for(cfg.brokers), configs=weak.configs)
        done()
    console.print(f"kafka up in {r.timings['cluster_start_s']}s at {cluster.bootstrap}")
    with console.status(f"starting the Spark driver ({what}) and its warm-up job"):
        if not early:
            spark_done = _timed(r, "spark_start_s")
            spark.start()
        deadline = time.monotonic() + cfg.startup_timeout
        while (ready := spark.ready()) is None:
            if spark.restarts() >= EARLY_EXITS:
                raise RuntimeError(_early_exits(spark))
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Spark query did not start in {cfg.startup_timeout:.0f}s; "
                                   f"see {r.rd.logs}/driver-*.log")
            time.sleep(0.5)
        spark_done()
    setup_done()
    warm = f", its warm-up job {ready['warm_up_s']:.1f}s" if isinstance(ready.get("warm_up_s"), (int, float)) else ""
    console.print(f"spark query up in {r.timings['spark_start_s']}s{' (started with Kafka)' if early else ''}{warm}; "
                  f"setup {r.timings['setup_s']}s")


def _output_values(r: _Run) -> tuple[tuple[str, str], ...]:
    """The placeholders of a user's ``--output`` (``Sink.job_values``), as ``PipelineArgs.output_values``."""
    if not r.sink.job_values:
        return ()
    place = JobPlace(directory=r.file_sink, output_topic=r.names.output, dsn=r.db.job_dsn if r.db else "")
    return tuple(r.sink.job_values(place).items())


def _start_database(r: _Run) -> None:
    """The database server the sink writes (``Sink.database``), through the backend's ``Databases``; its
    stop is registered before it starts. Raises what its start raises (naming the log)."""
    kind = r.sink.database
    r.db = db = r.backend.database(kind, r.rd.path / kind, r.rd.logs)
    r.td.push(f"{kind} stop", db.stop)
    r.td.track(db.stop)
    with r.console.status(f"starting {kind}"):
        done = _timed(r, "database_start_s")
        db.start()
        done()
    r.console.print(f"{kind} up in {r.timings['database_start_s']}s: {db.dsn}")


EARLY_EXITS = 3
"""Driver exits before the query first started that end the run at once (a broken --pipeline-cmd, a
missing module): a driver that cannot start would otherwise be restarted until --startup-timeout."""


def _early_exits(spark: SparkApp) -> str:
    """Why the run stops: the driver's exits and the last lines of its newest log."""
    log = spark.driver_log()
    tail = ""
    if log is not None:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        tail = "; its log ends: " + " | ".join(ln.strip() for ln in lines[-3:])
    return (f"the Spark driver exited {spark.restarts()} times before its query started{tail} "
            f"(see {log})")


def start_services(r: _Run) -> None:
    """The run phase's services, each with its stop pushed first: the live reader and the LSO sampler
    (started), the workload (built, not started) and the faults' context ``r.ctx``."""
    cfg, td = r.cfg, r.td
    r.live = live = LiveReader(r.cluster.bootstrap, r.names.output)
    td.push("live reader stop", live.stop)
    live.start()
    r.lso = LsoSampler(r.cluster.bootstrap, r.names.output)
    td.push("LSO sampler stop", r.lso.stop)
    r.lso.start()
    r.workload = workload = workloads.get(cfg.workload).client(r.cluster.bootstrap, r.names.input, r.history,
                                                               rate=cfg.rate, keys=cfg.keys, seed=cfg.seed,
                                                               producer=cfg.producer,
                                                               input_aborts=cfg.input_aborts)
    td.push("workload stop", lambda: workload.stop(timeout_s=5.0 if td.interrupted else None))
    ctx_caps = cfg.sink_capabilities
    r.ctx = NemesisContext(spark=r.spark, control=r.control, checkpoint=r.ckpt, cluster=r.cluster,
                           input_topic=r.names.input, output_topic=r.names.output, sink_ids=r.meta["sink_ids"],
                           hold_s=cfg.fault_hold,
                           network=r.net,
                           # a --pipeline-cmd pipeline's sink is unknown: its faults try the hooks that
                           # onceproof.pipeline.eos_sink honours, and the commit window is watched from outside
                           sink_capabilities=None if cfg.pipeline_cmd else ctx_caps,
                           commit_window="hook" if DRIVER_HOOKS in ctx_caps else "watch",
                           file_sink=r.file_sink, committed_end=lambda: r.sink.committed_ends(_output(r)),
                           lso=r.lso.latest)


def on_op(r: _Run):
    """The console line of each nemesis op (its outcome, target and evidence in brief)."""

    def show(op):
        style = {"effective": "red", "not-effective": "yellow"}.get(op["outcome"], "dim")
        r.console.print(f"  [{style}]nemesis {op['f']} → {op['outcome']}[/] {op['target']} "
                        f"{brief(op['evidence'])}")

    return show


def _run_phase(r: _Run) -> None:
    """Workload, live reader and nemesis for the time limit (longer, up to ``max_run_factor``, until
    every planned fault has had its turn)."""
    cfg, console, td = r.cfg, r.console, r.td
    start_services(r)
    workload, live, ctx = r.workload, r.live, r.ctx

    specs = sorted({f for _, f in r.plan})
    r.nem = nem = NemesisRunner(catalog.build(specs, txn_timeout_ms=cfg.txn_timeout_ms, partitions=cfg.partitions,
                                              max_offsets=cfg.max_offsets, kafka_upgrade_to=cfg.kafka_upgrade_to),
                                r.plan, ctx, r.nem_hist,
                                cfg.seed, on_op=on_op(r), rng_keys=cfg.rng_keys(), holds=cfg.fault_holds())
    td.push("nemesis stop and heal", lambda: _heal_faults(r, teardown=True))
    workload.start()
    nem.start(progress=lambda: checkpoint.latest_commit(r.ckpt))
    t0 = time.monotonic()
    next_report = t0
    planned = {f for _, f in r.plan}

    announced = False

    def keep_running(el: float) -> bool:
        nonlocal announced
        if _budget_left(el):
            return True
        nem.close()  # no new fault; the one in flight, if any, finishes (its own bounds)
        if nem.in_flight is not None and not announced:
            announced = True
            console.print(f"the run's fault budget is used up; letting {nem.in_flight} finish, no new fault")
        return nem.in_flight is not None

    def _budget_left(el: float) -> bool:
        return schedule.keep_running(el, nem.fault_time_s(),
                                     cfg.time_limit, cfg.max_run_factor, planned <= {op["f"] for op in nem.ops})

    extended = False
    while keep_running(el := time.monotonic() - t0):
        if el >= cfg.time_limit and not extended:
            extended = True
            console.print("time limit reached; running on until every fault has had its turn")
        if time.monotonic() >= next_report:
            s = workload.stats
            console.print(f"[{el:5.0f}s/{cfg.time_limit:.0f}s] sends ok={s.ok} info={s.info} fail={s.fail} "
                          f"| batch committed={checkpoint.latest_commit(r.ckpt)} | driver restarts="
                          f"{r.spark.restarts()} | faults={len(nem.ops)}")
            for e in workload.new_errors() + live.new_errors():
                console.print(f"  [yellow]{e}[/]")
            next_report += 5
        time.sleep(0.2)


def _heal_faults(r: _Run, teardown: bool = False) -> list[str]:
    """Stop the nemesis and undo every fault. In an interrupted teardown, faults are healed only as far
    as the teardown does not undo them anyway: no broker is restarted just to be killed."""
    if r.nem is None:
        return []
    if teardown and r.td.interrupted and r.ctx is not None:
        r.ctx.teardown.set()
    return r.nem.stop_and_heal(join_timeout_s=10.0 if r.td.interrupted else 120.0)


def _heal(r: _Run) -> None:
    console = r.console
    console.print("stopping the workload and healing faults")
    r.workload.stop()
    errors = _heal_faults(r)
    if errors:
        console.print(f"[red]heal errors: {errors}[/]")
    r.health = cluster_health(r.cluster, r.net)
    console.print(f"after heal: brokers registered {r.health['brokers_registered']}, "
                  f"stopped {r.health['brokers_stopped']}, proxies cut {r.health['proxies_cut']}")


def _recover(r: _Run) -> recovery.RecoveryStatus:
    done = _timed(r, "recovery_s")
    st = recovery.wait(r.cluster.bootstrap, r.names.input, r.names.output, r.ckpt, r.cfg.recovery_timeout,
                       progress=lambda s: r.console.print(f"  recovering ({s.seconds:.0f}s): {'; '.join(s.reasons)}"))
    done()
    if not st.finished:  # a query that stopped for good says why in its driver's log: quote it
        failure = recovery.query_failure(r.rd.path / "logs")
        if failure:
            st.reasons.append(f"{checking.QUERY_STOPPED}{failure}")
    r.console.print(f"recovery {'finished' if st.finished else '[yellow]did not finish[/]'} "
                    f"in {r.timings['recovery_s']}s")
    return st


def _output(r: _Run) -> OutputLocation:
    """Where the run's output is: the output topic, the sink's directory or its database."""
    return OutputLocation(r.cluster.bootstrap, r.names.output, directory=r.file_sink, workload=r.cfg.workload,
                          read=r.cfg.file_read, dsn=r.db.dsn if r.db else "", order_column=r.cfg.order_column)


def _check(r: _Run, st: recovery.RecoveryStatus) -> dict:
    done = _timed(r, "check_s")
    with r.console.status("reading topics at read_committed and checking"):
        live_frame = r.live.stop()
        lso_frame = r.lso.stop() if r.lso else None
        result = checking.check_live(r.cluster.bootstrap, r.names.input, r.names.output, r.rd.path, st, live=live_frame,
                                     lso_samples=lso_frame, strict=r.cfg.strict,
                                     workload=r.cfg.workload, file_sink=r.file_sink, file_read=r.cfg.file_read,
                                     reader=r.sink.read, dsn=r.db.dsn if r.db else "",
                                     order_column=r.cfg.order_column)
    done()
    return result


def _phases(r: _Run, drive: Callable[[_Run], None]) -> dict:
    """Setup → ``drive`` (the run phase: :func:`_run_phase`, or a session's commands) → heal → recover →
    check inside the teardown's ``ExitStack``; returns the result (verdict
    ``crashed`` on an exception or an interrupt). The teardown runs with SIGINT and SIGTERM ignored (a
    second Ctrl-C must not cut it short) and is bounded by the watchdog instead."""
    cfg, console, td = r.cfg, r.console, r.td
    result: dict = {}
    prev = None
    t_td = time.monotonic()
    try:
        with td.stack:
            # pushed first, so popped last: it outlives a SIGKILLed harness and stops what the run started
            watcher = reaper.start(str(r.rd.path))
            td.push("process reaper stop", lambda: reaper.stop_watcher(watcher))
            td.push("close histories", lambda: (r.history.close(), r.nem_hist.close()))
            if not cfg.keep_data and not r.warm:
                td.push("remove broker data", r.cluster.clean)
            try:
                _setup(r)
                drive(r)
                _heal(r)
                result = coverage.judge(_check(r, _recover(r)), r.plan, r.nem.ops,
                                        r.workload.stopped_by if r.workload else None)
            except KeyboardInterrupt as e:
                td.interrupted = True
                why = signals.reason(e)
                console.print(f"[yellow]{why}: tearing down (the history so far is kept)[/]")
                result = {"verdict": "crashed", "error": why}
            except Exception as e:  # noqa: BLE001 - a crashed run still gets a results.json and a teardown
                log.exception("run crashed")
                console.print(f"[red]run crashed: {e}[/]")
                result = {"verdict": "crashed", "error": repr(e)}
            finally:
                prev = (signal.signal(signal.SIGINT, signal.SIG_IGN), signal.signal(signal.SIGTERM, signal.SIG_IGN))
                td.begin()
                t_td = time.monotonic()
                console.print("tearing down"
                              + (" (interrupted: bounded, no broker restarts)" if td.interrupted else ""))
    finally:
        td.end()
        if prev is not None:
            signal.signal(signal.SIGINT, prev[0])
            signal.signal(signal.SIGTERM, prev[1])
    r.timings["teardown_s"] = round(time.monotonic() - t_td, 1)
    return result


@contextlib.contextmanager
def _client_log(rd: RunDir):
    """librdkafka's own logs (connection refused while a broker is down, ...) go to ``logs/clients.log``,
    not the console, while the run lasts."""
    handler = logging.FileHandler(rd.clients_log)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
    lk = logging.getLogger("onceproof.librdkafka")
    lk.addHandler(handler)
    lk.setLevel(logging.INFO)
    lk.propagate = False
    try:
        yield
    finally:
        lk.removeHandler(handler)
        handler.close()


def _begin(cfg: TestConfig, backend: Backend, console: Console, plan: list) -> tuple[RunDir, dict]:
    """The run directory and ``test.json`` (config, replay command, versions, schedule), announced."""
    rd = RunDir(Path(cfg.results_root), cfg.name)
    os.environ["ONCEPROOF_RUN"] = str(rd.path)  # inherited by every process we start: traceable leftovers
    sink_id = default_sink_id(rd.checkpoint, f"onceproof-{cfg.sink}")
    meta = {"config": {**asdict(cfg), "results_root": str(cfg.results_root)}, "name": cfg.name,
            "replay": cfg.replay_command(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "sink_id": sink_id, "sink_ids": [f"{sink_id}-{p}" for p in range(cfg.partitions)]}
    try:
        meta["versions"] = versions(backend, cfg.kafka_version, cfg.kafka_upgrade_to, cfg.pipeline_python or "",
                                    cfg.spark_version)
    except Exception as e:  # noqa: BLE001 - recorded; the setup below will fail with the real error
        meta["versions"] = {"error": repr(e)}
    meta["schedule"] = plan
    meta["faults"], meta["faults_left_out"] = cfg.faults, cfg.faults_left_out
    rd.write_json(TEST, meta)
    console.print(f"[bold]onceproof[/] {cfg.name} → {rd.path}")
    console.print(f"replay: [cyan]{cfg.replay_command()}[/]", soft_wrap=True)
    for spec, why in cfg.faults_left_out.items():
        console.print(f"[dim]all: left out {spec}: {why}[/]", soft_wrap=True)
    return rd, meta


def _finish(r: _Run, result: dict, t_start: float) -> int:
    """``results.json``, older runs pruned, ``junit.xml`` and the report, the verdict on the console;
    returns the exit code."""
    cfg, rd, console, td = r.cfg, r.rd, r.console, r.td
    r.timings["total_s"] = round(time.monotonic() - t_start, 1)
    result.update({"test": cfg.name, "run_dir": str(rd.path), "seed": cfg.seed, "replay": cfg.replay_command(),
                   "faults": fault_counts(r.nem.ops if r.nem else []),
                   "driver_restarts": r.spark.restarts() if r.spark else 0, "timings": r.timings,
                   "health_after_heal": r.health, "teardown": {"steps_s": td.steps, "errors": td.errors},
                   "client_errors": {"workload": r.workload.errors[:50] if r.workload else [],
                                     "live_reader": r.live.errors[:50] if r.live else []},
                   **({"workload_stopped": r.workload.stopped_by} if r.workload and r.workload.stopped_by else {}),
                   "input": _input_summary(cfg, r.workload), "versions": r.meta.get("versions") or {},
                   "cluster": r.meta.get("cluster") or {}})
    if result.get("platform_findings"):  # what ran, for a bug report against the client or the brokers
        vs = r.meta.get("versions") or {}
        result["platform_findings"].update(
            producer=cfg.producer, versions={k: vs[k] for k in ("kafka", "confluent-kafka", "librdkafka") if k in vs})
        origin = _duplicate_origin(result, rd.path, cfg.producer)
        if origin:
            result["platform_findings"]["origin"] = {"input-duplicate": origin}
    if td.errors:
        console.print(f"[red]teardown errors: {td.errors}[/]")
    rd.write_json(RESULTS, result)
    if result["verdict"] != "crashed":  # a crashed run keeps its files as they were when it stopped
        try:
            done = compact(rd.path)
            if done:
                console.print(f"compressed {len(done)} file(s) of the run: {sum(b for _, b, _ in done) / 1e6:.1f} MB "
                              f"→ {sum(a for _, _, a in done) / 1e6:.1f} MB (the history and logs, as .gz)")
        except OSError as e:
            console.print(f"[yellow]compressing the run's history and logs failed: {e}[/]")
    if cfg.keep_last:
        try:
            gone = retention.prune(Path(cfg.results_root), cfg.name, cfg.keep_last)
            if gone:
                console.print(f"pruned {len(gone)} older run(s) of {cfg.name} (--keep-last {cfg.keep_last})")
        except OSError as e:
            console.print(f"[yellow]pruning older runs failed: {e}[/]")
    try:
        write_junit(rd.path)
        report = build_report(rd.path)
        build_index(Path(cfg.results_root))
        result_report = f"report: {report}"
    except Exception as e:  # noqa: BLE001 - the verdict stands without its report
        log.exception("building the report failed")
        result_report = f"report failed: {e!r} (rebuild with `onceproof report {rd.path}`)"
    summarize(result, console)
    console.print(result_report)
    return EXIT.get(result["verdict"], 255)


def _duplicate_origin(result: dict, run_dir: Path, producer: str) -> str | None:
    """``checkers.platform.duplicate_origin`` of the run's ``input-duplicate`` examples, their copies'
    timestamps read from ``input.parquet`` (only their partitions); ``None`` without such examples or when
    the snapshot cannot be read."""
    examples = (result.get("anomalies") or {}).get("input-duplicate") or []
    places = {(int(i["partition"]), int(i["offset"])) for ex in examples for i in ex.get("inputs") or []}
    if not places:
        return None
    try:
        t = pq.read_table(RunFiles(run_dir).input, columns=["partition", "offset", "timestamp"],
                          filters=[("partition", "in", sorted({p for p, _ in places}))]).to_pandas()
    except (OSError, ValueError, pa.ArrowException):
        return None
    t = t[[(int(p), int(o)) in places for p, o in zip(t["partition"], t["offset"])]]
    times = {(int(p), int(o)): int(ts) for p, o, ts in zip(t["partition"], t["offset"], t["timestamp"])}
    return platform_findings.duplicate_origin(examples, times, producer)


def _input_summary(cfg: TestConfig, workload) -> dict:
    """How the input was written (``results.json["input"]``): the producer, the fraction of its
    transactions aborted on purpose as asked (``input_aborts``), and, from a transactional client, the
    transactions begun, those aborted on purpose and how long the held one stayed open (ms)."""
    out = {"producer": cfg.producer, "input_aborts": producers.aborts(cfg.producer, cfg.input_aborts)}
    for k in ("txns", "aborted_on_purpose", "hold_ms"):
        if hasattr(workload, k):
            out[k] = getattr(workload, k)
    return out


def run(cfg: TestConfig, console: Console | None = None,
        drive: Callable[[_Run], None] | None = None) -> tuple[int, Path]:
    """Run one test: setup → run → heal → recover → check, then teardown on every path. ``drive``
    replaces the run phase (default :func:`_run_phase`, the timed workload and fault plan): a session's
    supervisor (``harness/session/supervisor.py``) drives it from commands instead.

    Returns ``(exit code, run directory)``; never raises for a failed or interrupted run (Ctrl-C and
    SIGTERM give verdict ``crashed``, exit 255). Teardown is bounded by ``TEARDOWN_BOUND_S`` seconds.
    Raises ``ConfigError`` (nothing started) for an invalid config, and ``ClusterError`` when the
    backend cannot reserve the cluster's resources (ports) before the run starts.
    """
    console = console or Console()
    cfg.validate()  # raises ConfigError (and PlanDoesNotFit as one) before anything exists
    if cfg.spark_version:  # a line (3.5) becomes its release (3.5.7): the replay line and test.json pin it
        cfg = replace(cfg, spark_version=spark_release.release(cfg.spark_version))
    plan = cfg.fault_plan()
    backend = cfg.backend_instance()
    # every Kafka client of the run takes its security from here (kafka_config); the clusters onceproof
    # starts are PLAINTEXT, one it does not own brings its own (ForeignCluster)
    foreign = isinstance(backend, ForeignCluster)
    kafka_config.configure(backend.security() if foreign else kafka_config.PLAINTEXT)
    topics.guard(None)  # set below for a foreign cluster, once the run's topic names are known
    t_start = time.monotonic()
    rd, meta = _begin(cfg, backend, console, plan)
    with _client_log(rd):
        history = HistoryWriter(rd.history)
        nem_hist = HistoryWriter(rd.nemesis, start_ns=history.start_ns)
        specs = [f for _, f in plan]
        shape = ClusterShape(rd.cluster, nodes=cfg.brokers, log_dir=rd.logs, proxied=cfg.proxied,
                             clocks=catalog.needs_clock(specs), small_disks=catalog.needs_small_disks(specs),
                             lazyfs=catalog.needs_lazyfs(specs), own_groups=catalog.needs_own_groups(specs),
                             kafka_version=cfg.kafka_version)
        on_warm, names = _lease(cfg, backend, shape, specs, meta, console)
        cluster = on_warm.cluster if on_warm else backend.cluster(shape)
        r = _Run(cfg, rd, console, meta, history, nem_hist, backend, cluster, Teardown(ExitStack()), plan=plan,
                 names=names or (backend.topic_names() if foreign else TOPICS), warm=on_warm)
        if foreign or on_warm:
            topics.guard(TopicGuard(r.names))
        result = _phases(r, drive or _run_phase)
    return _finish(r, result, t_start), rd.path


def _lease(cfg: TestConfig, backend: Backend, shape: ClusterShape, specs: list[str], meta: dict,
           console: Console) -> tuple[WarmCluster | None, TopicNames | None]:
    """With ``--warm-cluster``: the warm cluster after its health gate and the run's own topic names, or
    ``(None, None)`` when the run needs a fresh cluster (:func:`onceproof.harness.warm.refusal`); the choice
    goes to ``meta["cluster"]`` (``results.json``'s ``cluster``). Raises ``ClusterError`` for a warm cluster
    that cannot be made healthy."""
    if not cfg.warm_cluster:
        meta["cluster"] = {"warm": False}
        return None, None
    w = WarmCluster(backend, Path(cfg.warm_cluster))
    entry = cfg.sink_entry
    why = warm.refusal(shape, w.shape, specs) or warm.job_refusal(
        cfg.pipeline_cmd, writes_topic=entry.output_dir is None and entry.database is None)
    if why:
        meta["cluster"] = {"warm": False, "fresh_because": why}
        console.print(f"[yellow]a fresh cluster for this run, not the warm one: {why}[/]", soft_wrap=True)
        return None, None
    with console.status("the warm cluster's health gate"):
        gate = w.gate()
    meta["cluster"] = {"warm": True, "dir": str(w.data_dir), "gate": gate.record()}
    fixed = (f"; restarted broker(s) {gate.restarted}" if gate.restarted else "") + \
        (f"; found: {'; '.join(gate.problems[:3])}" if gate.problems else "")
    console.print(f"on the warm cluster at {w.cluster.bootstrap} (gate {gate.seconds}s{fixed})", soft_wrap=True)
    return w, w.names()


def cluster_health(cluster: Cluster, net: FaultNetwork | None, timeout_s: float = 90.0) -> dict:
    """After heal: wait (≤ ``timeout_s``) until every broker is registered (Kafka's metadata at the
    cluster's bootstrap); report what is registered, any broker whose process is gone or still paused,
    and any network path still cut."""
    want = list(cluster.nodes)
    deadline = time.monotonic() + timeout_s
    seen: list[int] = []
    while time.monotonic() < deadline:
        try:
            seen = sorted(topics.admin(cluster.bootstrap).list_topics(timeout=5).brokers)
        except Exception:  # noqa: BLE001 - still electing
            seen = []
        if seen == want:
            break
        time.sleep(1)
    stopped = [n for n in want if not (st := cluster.state(n)).alive or st.paused]
    cut = net.cut_paths() if net is not None else []
    return {"brokers_registered": seen, "brokers_expected": want, "brokers_stopped": stopped,
            "proxies_cut": cut, "healthy": seen == want and not stopped and not cut}
