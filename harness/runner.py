"""The test runner: setup → run → heal → recover → check → teardown (Jepsen's ``jepsen.core/run!``).

Teardown runs on every exit path (normal, exception, Ctrl-C): faults are healed, the driver's process
group and every broker are killed, so no JVM outlives the run.

Exit codes (Jepsen's): 0 valid, 1 invalid, 2 unknown, 255 crashed.
"""

from __future__ import annotations

import logging
import os
import platform
import shutil
import signal
import time
import threading
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from checkers.compose import ANOMALIES
from harness import checkpoint, checking, jars, recovery, signals, topics
from harness.faultproxy import ProxyNetwork
from harness.history import HistoryWriter
from harness.live_reader import LiveReader
from harness.kafka import ClusterSpec, KafkaCluster, free_base_port
from harness.config import TestConfig
from harness.supervisor import DriverSupervisor, collect_executor_logs, driver_argv, read_ready
from nemesis import catalog, coverage
from nemesis.fault import NemesisContext
from nemesis.runner import NemesisRunner
from pipeline import job as pipeline_job
from report.html import build_report
from report.index import build_index
from report.junit import write_junit
from store import retention
from store.runfiles import RESULTS, TEST
from store.runs import RunDir
from workloads.keyed import KeyedWorkload

EXIT = {"valid": 0, "invalid": 1, "unknown": 2, "crashed": 255}
log = logging.getLogger("onceproof.runner")


INPUT, OUTPUT, PROGRESS = "input", "output", "output-progress"


def versions() -> dict[str, str]:
    import confluent_kafka
    import pyspark

    return {"kafka": jars.kafka_version(), "pyspark": pyspark.__version__,
            "spark-sql-kafka": jars.spark_kafka_classpath().version,
            "confluent-kafka": confluent_kafka.version()[0], "librdkafka": confluent_kafka.libversion()[0],
            "python": platform.python_version(), "java": shutil.which("java") or "?"}


TEARDOWN_BOUND_S = 60.0  # README: teardown ends within this many seconds of its start, whatever hangs


class _Teardown:
    """The run's resources, torn down in reverse order of creation through an ``ExitStack``.

    Every step is guarded on its own (an exception in ``workload.stop`` must not skip ``cluster.down``),
    timed, and recorded in ``errors``. A watchdog SIGKILLs every process group still registered with
    :meth:`track` once ``TEARDOWN_BOUND_S`` seconds have passed, which unblocks any step waiting on them.
    """

    def __init__(self, stack: ExitStack):
        self.stack = stack
        self.errors: list[str] = []
        self.steps: dict[str, float] = {}
        self.interrupted = False
        self._kills: list = []
        self._watchdog: threading.Timer | None = None

    def push(self, name: str, fn) -> None:
        """Run ``fn()`` at teardown (LIFO); its failure is recorded and the next step still runs."""
        def step():
            t = time.monotonic()
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - one failed step must not skip the others
                log.exception("teardown step %s failed", name)
                self.errors.append(f"{name}: {e!r}")
            self.steps[name] = round(time.monotonic() - t, 1)
        self.stack.callback(step)

    def track(self, kill) -> None:
        """``kill()`` is the watchdog's last resort for one resource (SIGKILL its process group)."""
        self._kills.append(kill)

    def begin(self) -> None:
        """Start the bounded-time watchdog (called once, when teardown starts)."""
        def last_resort():
            log.error("teardown still running after %.0fs: SIGKILL everything left", TEARDOWN_BOUND_S)
            self.errors.append(f"watchdog: teardown exceeded {TEARDOWN_BOUND_S:.0f}s; killed what was left")
            for k in self._kills:
                try:
                    k()
                except Exception:  # noqa: BLE001 - last resort, keep going
                    pass
        self._watchdog = threading.Timer(TEARDOWN_BOUND_S, last_resort)
        self._watchdog.daemon = True
        self._watchdog.start()

    def end(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()


@dataclass
class _Run:
    """One run's state, shared by the phase functions."""

    cfg: TestConfig
    rd: RunDir
    console: Console
    meta: dict
    history: HistoryWriter
    nem_hist: HistoryWriter
    spec: ClusterSpec
    td: _Teardown
    timings: dict = field(default_factory=dict)
    cluster: KafkaCluster | None = None
    net: ProxyNetwork | None = None
    sup: DriverSupervisor | None = None
    live: LiveReader | None = None
    workload: KeyedWorkload | None = None
    nem: NemesisRunner | None = None
    ctx: NemesisContext | None = None
    plan: list = field(default_factory=list)
    health: dict = field(default_factory=dict)

    @property
    def ckpt(self) -> Path:
        return self.rd.checkpoint

    @property
    def control(self) -> Path:
        return self.rd.control


def _timed(r: _Run, key: str):
    t = time.monotonic()
    return lambda: r.timings.__setitem__(key, round(time.monotonic() - t, 1))


def _setup(r: _Run) -> None:
    """Proxies (if any), Kafka and topics, the supervised Spark driver. Each resource's teardown is
    registered *before* it starts, so an interrupt in the middle of a start still stops it."""
    cfg, console, td = r.cfg, r.console, r.td
    if cfg.proxied:
        r.net = ProxyNetwork(r.spec)
        td.push("proxy network stop", r.net.stop)
        td.track(r.net.server.kill)
        with console.status("building/starting toxiproxy and the cluster's proxies"):
            done = _timed(r, "proxy_start_s")
            r.net.start(r.rd.logs / "toxiproxy.log")
            done()
        console.print(f"toxiproxy up in {r.timings['proxy_start_s']}s: {len(r.net.names)} proxies at "
                      f"{r.net.server.url}")
    r.cluster = cluster = KafkaCluster(r.spec)
    td.push("cluster down", cluster.down)
    td.track(cluster.down)
    with console.status("starting Kafka (KRaft, %d brokers)" % cfg.brokers):
        done = _timed(r, "cluster_start_s")
        cluster.up()
        topics.create_topics(cluster.bootstrap, {INPUT: cfg.partitions, OUTPUT: cfg.partitions, PROGRESS: 1},
                             replication=min(3, cfg.brokers))
        done()
    console.print(f"kafka up in {r.timings['cluster_start_s']}s at {cluster.bootstrap}")
    argv = driver_argv(bootstrap=cluster.bootstrap, sink=cfg.sink, checkpoint=r.ckpt, control=r.control,
                       sink_log=r.rd.sink, input_topic=INPUT, output_topic=OUTPUT,
                       progress_topic=PROGRESS, sink_id=r.meta["sink_id"], trigger_ms=cfg.trigger_ms,
                       max_offsets=cfg.max_offsets, txn_timeout_ms=cfg.txn_timeout_ms,
                       pool_size=cfg.partitions, master=cfg.master)
    r.sup = sup = DriverSupervisor(argv, r.rd.logs, executor_dir=r.rd.executor_logs)

    def stop_driver():
        try:
            sup.stop()
        finally:
            collect_executor_logs(r.control, r.rd.executor_logs)
    td.push("driver stop", stop_driver)
    td.track(sup.kill_now)
    with console.status(f"starting the Spark driver ({cfg.master}, sink={cfg.sink})"):
        done = _timed(r, "spark_start_s")
        sup.start()
        deadline = time.monotonic() + cfg.startup_timeout
        while read_ready(r.control) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Spark query did not start in {cfg.startup_timeout:.0f}s; "
                                   f"see {r.rd.logs}/driver-*.log")
            time.sleep(0.5)
        done()
    console.print(f"spark query up in {r.timings['spark_start_s']}s")


def _run_phase(r: _Run) -> None:
    """Workload, live reader and nemesis for the time limit (longer, up to ``max_run_factor``, until
    every planned fault has had its turn)."""
    cfg, console, td = r.cfg, r.console, r.td
    r.live = live = LiveReader(r.cluster.bootstrap, OUTPUT)
    td.push("live reader stop", live.stop)
    live.start()
    r.workload = workload = KeyedWorkload(r.cluster.bootstrap, INPUT, r.history, rate=cfg.rate, keys=cfg.keys,
                                          seed=cfg.seed)
    td.push("workload stop", lambda: workload.stop(timeout_s=5.0 if td.interrupted else None))
    r.ctx = ctx = NemesisContext(supervisor=r.sup, control=r.control, checkpoint=r.ckpt, cluster=r.cluster,
                                 output_topic=OUTPUT, sink_ids=r.meta["sink_ids"], hold_s=cfg.fault_hold,
                                 proxies=r.net)

    def on_op(op):
        style = {"effective": "red", "not-effective": "yellow"}.get(op["outcome"], "dim")
        console.print(f"  [{style}]nemesis {op['f']} → {op['outcome']}[/] {op['target']} "
                      f"{_brief(op['evidence'])}")

    specs = sorted({f for _, f in r.plan})
    r.nem = nem = NemesisRunner(catalog.build(specs, txn_timeout_ms=cfg.txn_timeout_ms), r.plan, ctx, r.nem_hist,
                                cfg.seed, on_op=on_op)
    td.push("nemesis stop and heal", lambda: _heal_faults(r, teardown=True))
    workload.start()
    nem.start(ready=lambda: checkpoint.latest_commit(r.ckpt) is not None)
    t0 = time.monotonic()
    next_report = t0
    planned = {f for _, f in r.plan}

    def keep_running(el: float) -> bool:
        if el < cfg.time_limit:
            return True
        done = {op["f"] for op in nem.ops}
        return el < cfg.time_limit * cfg.max_run_factor and not planned <= done

    extended = False
    while keep_running(el := time.monotonic() - t0):
        if el >= cfg.time_limit and not extended:
            extended = True
            console.print("time limit reached; running on until every fault has had its turn")
        if time.monotonic() >= next_report:
            s = workload.stats
            console.print(f"[{el:5.0f}s/{cfg.time_limit:.0f}s] sends ok={s.ok} info={s.info} fail={s.fail} "
                          f"| batch committed={checkpoint.latest_commit(r.ckpt)} | driver restarts="
                          f"{r.sup.restarts()} | faults={len(nem.ops)}")
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
    console.print("time limit reached: stopping workload and healing faults")
    r.workload.stop()
    errors = _heal_faults(r)
    if errors:
        console.print(f"[red]heal errors: {errors}[/]")
    r.health = cluster_health(r.cluster, r.net)
    console.print(f"after heal: brokers registered {r.health['brokers_registered']}, "
                  f"stopped {r.health['brokers_stopped']}, proxies cut {r.health['proxies_cut']}")


def _recover(r: _Run) -> recovery.RecoveryStatus:
    done = _timed(r, "recovery_s")
    st = recovery.wait(r.cluster.bootstrap, INPUT, OUTPUT, r.ckpt, r.cfg.recovery_timeout,
                       progress=lambda s: r.console.print(f"  recovering ({s.seconds:.0f}s): {'; '.join(s.reasons)}"))
    done()
    r.console.print(f"recovery {'finished' if st.finished else '[yellow]did not finish[/]'} "
                    f"in {r.timings['recovery_s']}s")
    return st


def _check(r: _Run, st: recovery.RecoveryStatus) -> dict:
    done = _timed(r, "check_s")
    with r.console.status("reading topics at read_committed and checking"):
        live_frame = r.live.stop()
        result = checking.check_live(r.cluster.bootstrap, INPUT, OUTPUT, r.rd.path, st, live=live_frame)
    done()
    return result


def run(cfg: TestConfig, console: Console | None = None) -> tuple[int, Path]:
    """Run one test: setup → run → heal → recover → check, then teardown on every path.

    Returns ``(exit code, run directory)``; never raises for a failed or interrupted run (Ctrl-C and
    SIGTERM give verdict ``crashed``, exit 255). Teardown is bounded by ``TEARDOWN_BOUND_S`` seconds.
    """
    console = console or Console()
    cfg.validate()  # raises ConfigError (and PlanDoesNotFit as one) before anything exists
    plan = cfg.fault_plan()
    rd = RunDir(Path(cfg.results_root), cfg.name)
    os.environ["ONCEPROOF_RUN"] = str(rd.path)  # inherited by every process we start: traceable leftovers
    t_start = time.monotonic()
    sink_id = pipeline_job.default_sink_id(rd.checkpoint, f"onceproof-{cfg.sink}")
    meta = {"config": {**asdict(cfg), "results_root": str(cfg.results_root)}, "name": cfg.name,
            "replay": cfg.replay_command(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "sink_id": sink_id, "sink_ids": [f"{sink_id}-{p}" for p in range(cfg.partitions)]}
    try:
        meta["versions"] = versions()
    except Exception as e:  # noqa: BLE001 - recorded; the setup below will fail with the real error
        meta["versions"] = {"error": repr(e)}
    meta["schedule"] = plan
    rd.write_json(TEST, meta)
    console.print(f"[bold]onceproof[/] {cfg.name} → {rd.path}")
    console.print(f"replay: [cyan]{cfg.replay_command()}[/]", soft_wrap=True)

    # librdkafka's own logs (connection refused while a broker is down, ...) go to a file, not the console
    client_log = logging.FileHandler(rd.clients_log)
    client_log.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
    lk = logging.getLogger("onceproof.librdkafka")
    lk.addHandler(client_log)
    lk.setLevel(logging.INFO)
    lk.propagate = False
    history = HistoryWriter(rd.history)
    nem_hist = HistoryWriter(rd.nemesis, start_ns=history.start_ns)
    spec = ClusterSpec(rd.cluster, nodes=cfg.brokers, proxied=cfg.proxied,
                       base_port=free_base_port(cfg.brokers, proxied=cfg.proxied), log_dir=rd.logs)
    result: dict = {}
    prev = None
    t_td = time.monotonic()
    stack = ExitStack()
    td = _Teardown(stack)
    r = _Run(cfg, rd, console, meta, history, nem_hist, spec, td, plan=plan)
    try:
        with stack:
            td.push("close histories", lambda: (history.close(), nem_hist.close()))
            if not cfg.keep_data:
                td.push("remove broker data", lambda: [shutil.rmtree(spec.data_dir / f"node{n.node_id}" / "data",
                                                                     ignore_errors=True) for n in spec.node_specs])
            try:
                _setup(r)
                _run_phase(r)
                _heal(r)
                result = coverage.judge(_check(r, _recover(r)), plan, r.nem.ops)
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
                # a second Ctrl-C must not cut the teardown short; the watchdog bounds it instead
                prev = (signal.signal(signal.SIGINT, signal.SIG_IGN), signal.signal(signal.SIGTERM, signal.SIG_IGN))
                td.begin()
                t_td = time.monotonic()
                console.print("tearing down" + (" (interrupted: bounded, no broker restarts)" if td.interrupted else ""))
    finally:
        td.end()
        if prev is not None:
            signal.signal(signal.SIGINT, prev[0])
            signal.signal(signal.SIGTERM, prev[1])
        lk.removeHandler(client_log)
        client_log.close()
    r.timings["teardown_s"] = round(time.monotonic() - t_td, 1)
    r.timings["total_s"] = round(time.monotonic() - t_start, 1)
    faults = _fault_summary(r.nem.ops if r.nem else [])
    result.update({"test": cfg.name, "run_dir": str(rd.path), "seed": cfg.seed, "replay": cfg.replay_command(),
                   "faults": faults, "driver_restarts": r.sup.restarts() if r.sup else 0, "timings": r.timings,
                   "health_after_heal": r.health, "teardown": {"steps_s": td.steps, "errors": td.errors},
                   "client_errors": {"workload": r.workload.errors[:50] if r.workload else [],
                                     "live_reader": r.live.errors[:50] if r.live else []}})
    if td.errors:
        console.print(f"[red]teardown errors: {td.errors}[/]")
    rd.write_json(RESULTS, result)
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
    return EXIT.get(result["verdict"], 255), rd.path


def cluster_health(cluster: KafkaCluster, net: ProxyNetwork | None, timeout_s: float = 90.0) -> dict:
    """After heal: wait (≤ ``timeout_s``) until every broker is registered; report what is registered,
    any broker process still stopped (SIGSTOP), and any proxy still cut."""
    import psutil

    from harness import processes

    want = sorted(cluster.brokers)
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
    stopped = []
    for i, b in cluster.brokers.items():
        try:
            if b.pid is None or not processes.alive(b.pid) or psutil.Process(b.pid).status() == psutil.STATUS_STOPPED:
                stopped.append(i)
        except psutil.Error:
            stopped.append(i)
    return {"brokers_registered": seen, "brokers_expected": want, "brokers_stopped": stopped,
            "proxies_cut": net.disabled() if net is not None else [], "healthy": seen == want and not stopped
            and not (net.disabled() if net is not None else [])}


def _brief(ev: dict) -> str:
    keys = ("batch", "pid", "executor_id", "offsets_logged", "commit_logged_after_kill", "reason")
    return " ".join(f"{k}={ev[k]}" for k in keys if k in ev)


def _fault_summary(ops: list[dict]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for op in ops:
        d = out.setdefault(op["f"], {})
        d[op["outcome"]] = d.get(op["outcome"], 0) + 1
    return out


def summarize(result: dict, console: Console) -> None:
    """Print the verdict, anomaly counts and faults as tables."""
    v = result.get("verdict", "crashed")
    color = {"valid": "green", "invalid": "red", "unknown": "yellow"}.get(v, "magenta")
    t = Table(title=f"{result.get('test', '')}: [{color} bold]{v.upper()}[/]")
    t.add_column("anomaly")
    t.add_column("count", justify="right")
    t.add_column("first example")
    counts = result.get("counts", {})
    for a in ANOMALIES:
        ex = (result.get("anomalies", {}).get(a) or [None])[0]
        t.add_row(a, str(counts.get(a, "-")), _short(ex))
    console.print(t)
    if result.get("coverage"):
        ct = Table(title="fault coverage (turns)")
        for c in ("fault", "target", "planned", "effective", "exercised", "other"):
            ct.add_column(c, justify="left" if c in ("fault", "target", "other") else "right")
        for row in result["coverage"]:
            style = "" if row["exercised"] else "yellow"
            ct.add_row(row["fault"], row["target"], str(row["planned"]), str(row["effective"]),
                       f"[{style}]{row['exercised']}[/]" if style else str(row["exercised"]),
                       ", ".join(f"{k}={n}" for k, n in row["other"].items()))
        console.print(ct)
    elif result.get("faults"):
        ft = Table(title="faults")
        ft.add_column("fault")
        ft.add_column("effective", justify="right")
        ft.add_column("other")
        for f, d in result["faults"].items():
            ft.add_row(f, str(d.get("effective", 0)), ", ".join(f"{k}={n}" for k, n in d.items() if k != "effective"))
        console.print(ft)
    for r in result.get("unknown_reasons", []):
        console.print(f"[yellow]unknown because: {r}[/]")
    if result.get("error"):
        console.print(f"[magenta]error: {result['error']}[/]")
    st = result.get("stats", {})
    if st:
        console.print(f"input {st.get('input_records')} records, output {st.get('output_records')} records, "
                      f"{st.get('keys')} keys; sends ok={st.get('sends_ok')} info={st.get('sends_info')} "
                      f"fail={st.get('sends_fail')}; driver restarts={result.get('driver_restarts')}")
    console.print(f"results: {result.get('run_dir')}")


def _short(ex) -> str:
    if ex is None:
        return ""
    if "copies" in ex:
        batches = sorted({c.get("batch", "?") for c in ex["copies"]})
        return f"key={ex['key']} seq={ex['seq']} ×{len(ex['copies'])} batch={','.join(batches)}"
    return " ".join(f"{k}={v}" for k, v in list(ex.items())[:6])
