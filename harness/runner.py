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
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from checkers.compose import ANOMALIES
from harness import checkpoint, checking, jars, recovery, signals, topics
from harness.faultproxy import ProxyNetwork
from harness.history import HistoryWriter
from harness.live_reader import LiveReader
from harness.junit import write_junit
from harness.report import build_index, build_report
from harness.kafka import ClusterSpec, KafkaCluster, free_base_port
from harness.config import TestConfig
from harness.store import RunDir
from harness.supervisor import DriverSupervisor, collect_executor_logs, driver_argv, read_ready
from nemesis import catalog, schedule
from nemesis.fault import NemesisContext
from nemesis.runner import NemesisRunner
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


def run(cfg: TestConfig, console: Console | None = None) -> tuple[int, Path]:
    """Run one test. Returns ``(exit code, run directory)``; never raises for a failed run."""
    console = console or Console()
    rd = RunDir(Path(cfg.results_root), cfg.name)
    os.environ["ONCEPROOF_RUN"] = str(rd.path)  # inherited by every process we start: traceable leftovers
    t_start = time.monotonic()
    timings: dict[str, float] = {}
    meta = {"config": {**asdict(cfg), "results_root": str(cfg.results_root)}, "name": cfg.name,
            "replay": cfg.replay_command(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    try:
        meta["versions"] = versions()
    except Exception as e:  # noqa: BLE001 - recorded; the setup below will fail with the real error
        meta["versions"] = {"error": repr(e)}
    rd.write_json("test.json", meta)
    console.print(f"[bold]onceproof[/] {cfg.name} → {rd.path}")
    console.print(f"replay: [cyan]{cfg.replay_command()}[/]")

    # librdkafka's own logs (connection refused while a broker is down, ...) go to a file, not the console
    client_log = logging.FileHandler(rd / "logs" / "clients.log")
    client_log.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
    lk = logging.getLogger("onceproof.librdkafka")
    lk.addHandler(client_log)
    lk.setLevel(logging.INFO)
    lk.propagate = False
    history = HistoryWriter(rd / "history.jsonl")
    nem_hist = HistoryWriter(rd / "nemesis.jsonl", start_ns=history.start_ns)
    spec = ClusterSpec(rd / "cluster", nodes=cfg.brokers, proxied=cfg.proxied,
                       base_port=free_base_port(cfg.brokers, proxied=cfg.proxied), log_dir=rd / "logs")
    cluster = KafkaCluster(spec)
    net: ProxyNetwork | None = None
    sup: DriverSupervisor | None = None
    live: LiveReader | None = None
    workload: KeyedWorkload | None = None
    nem: NemesisRunner | None = None
    result: dict = {}
    health: dict = {}
    try:
        # -- setup
        if cfg.proxied:
            with console.status("building/starting toxiproxy and the cluster's proxies"):
                t = time.monotonic()
                net = ProxyNetwork(spec).start(rd / "logs" / "toxiproxy.log")
                timings["proxy_start_s"] = round(time.monotonic() - t, 1)
            console.print(f"toxiproxy up in {timings['proxy_start_s']}s: {len(net.names)} proxies at {net.server.url}")
        with console.status("starting Kafka (KRaft, %d brokers)" % cfg.brokers):
            t = time.monotonic()
            cluster.up()
            topics.create_topics(cluster.bootstrap, {INPUT: cfg.partitions, OUTPUT: cfg.partitions,
                                                     PROGRESS: 1}, replication=min(3, cfg.brokers))
            timings["cluster_start_s"] = round(time.monotonic() - t, 1)
        console.print(f"kafka up in {timings['cluster_start_s']}s at {cluster.bootstrap}")
        ckpt, control = rd / "checkpoint", rd / "control"
        argv = driver_argv(bootstrap=cluster.bootstrap, sink=cfg.sink, checkpoint=ckpt, control=control,
                           sink_log=rd / "sink.jsonl", input_topic=INPUT, output_topic=OUTPUT,
                           progress_topic=PROGRESS, sink_id=f"onceproof-{cfg.sink}", trigger_ms=cfg.trigger_ms,
                           max_offsets=cfg.max_offsets, txn_timeout_ms=cfg.txn_timeout_ms,
                           pool_size=cfg.partitions, master=cfg.master)
        sup = DriverSupervisor(argv, rd / "logs", executor_dir=rd / "logs" / "executors")
        with console.status(f"starting the Spark driver ({cfg.master}, sink={cfg.sink})"):
            t = time.monotonic()
            sup.start()
            deadline = time.monotonic() + cfg.startup_timeout
            while read_ready(control) is None:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the Spark query did not start in {cfg.startup_timeout:.0f}s; "
                                       f"see {rd / 'logs'}/driver-*.log")
                time.sleep(0.5)
            timings["spark_start_s"] = round(time.monotonic() - t, 1)
        console.print(f"spark query up in {timings['spark_start_s']}s")

        # -- run
        live = LiveReader(cluster.bootstrap, OUTPUT)
        live.start()
        workload = KeyedWorkload(cluster.bootstrap, INPUT, history, rate=cfg.rate, keys=cfg.keys, seed=cfg.seed)
        plan = schedule.plan(cfg.nemesis, cfg.nemesis_interval, cfg.time_limit, cfg.seed,
                             targets=catalog.target_choices())
        meta["schedule"] = plan
        rd.write_json("test.json", meta)
        sink_ids = [f"onceproof-{cfg.sink}-{p}" for p in range(cfg.partitions)]
        ctx = NemesisContext(supervisor=sup, control=control, checkpoint=ckpt, cluster=cluster,
                             output_topic=OUTPUT, sink_ids=sink_ids, hold_s=cfg.fault_hold, proxies=net)

        def on_op(op):
            style = {"effective": "red", "not-effective": "yellow"}.get(op["outcome"], "dim")
            console.print(f"  [{style}]nemesis {op['f']} → {op['outcome']}[/] {op['target']} "
                          f"{_brief(op['evidence'])}")

        specs = sorted({f for _, f in plan})
        nem = NemesisRunner(catalog.build(specs, txn_timeout_ms=cfg.txn_timeout_ms), plan, ctx, nem_hist,
                            cfg.seed, on_op=on_op)
        workload.start()
        nem.start(ready=lambda: checkpoint.latest_commit(ckpt) is not None)
        t0 = time.monotonic()
        next_report = t0
        # The run lasts the time limit, and longer (up to max_run_factor × time limit) until every
        # requested fault has been invoked once: `--nemesis all` means all, even in a short run.
        def keep_running(el: float) -> bool:
            if el < cfg.time_limit:
                return True
            done = {op["f"].partition(":")[0] for op in nem.ops}
            wanted = {f.partition(":")[0] for f in cfg.nemesis}
            return el < cfg.time_limit * cfg.max_run_factor and not wanted <= done

        extended = False
        while keep_running(el := time.monotonic() - t0):
            if el >= cfg.time_limit and not extended:
                extended = True
                console.print("time limit reached; running on until every fault has had its turn")
            if time.monotonic() >= next_report:
                s = workload.stats
                console.print(f"[{el:5.0f}s/{cfg.time_limit:.0f}s] sends ok={s.ok} info={s.info} fail={s.fail} "
                              f"| batch committed={checkpoint.latest_commit(ckpt)} | driver restarts="
                              f"{sup.restarts()} | faults={len(nem.ops)}")
                next_report += 5
            time.sleep(0.2)

        # -- heal
        console.print("time limit reached: stopping workload and healing faults")
        workload.stop()
        heal_errors = nem.stop_and_heal()
        if heal_errors:
            console.print(f"[red]heal errors: {heal_errors}[/]")

        health = cluster_health(cluster, net)
        console.print(f"after heal: brokers registered {health['brokers_registered']}, "
                      f"stopped {health['brokers_stopped']}, proxies cut {health['proxies_cut']}")

        # -- recover
        t = time.monotonic()
        st = recovery.wait(cluster.bootstrap, INPUT, OUTPUT, ckpt, cfg.recovery_timeout,
                           progress=lambda s: console.print(f"  recovering ({s.seconds:.0f}s): "
                                                            f"{'; '.join(s.reasons)}"))
        timings["recovery_s"] = round(time.monotonic() - t, 1)
        console.print(f"recovery {'finished' if st.finished else '[yellow]did not finish[/]'} "
                      f"in {timings['recovery_s']}s")

        # -- check
        t = time.monotonic()
        with console.status("reading topics at read_committed and checking"):
            live_frame = live.stop()
            result = checking.check_live(cluster.bootstrap, INPUT, OUTPUT, rd.path, st, live=live_frame)
        timings["check_s"] = round(time.monotonic() - t, 1)
    except KeyboardInterrupt as e:
        why = signals.reason(e)
        interrupted = True
        console.print(f"[yellow]{why}: tearing down (the history so far is kept)[/]")
        result = {"verdict": "crashed", "error": why}
    except Exception as e:  # noqa: BLE001 - a crashed run still gets a results.json and a teardown
        log.exception("run crashed")
        console.print(f"[red]run crashed: {e}[/]")
        result = {"verdict": "crashed", "error": repr(e)}
    finally:
        # -- teardown, on every path; a second Ctrl-C must not cut it short
        prev_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
        prev_term = signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if workload is not None:
            workload.stop()
        if live is not None:
            live.stop()
        if nem is not None:
            nem.stop_and_heal()
        if sup is not None:
            sup.stop()
            collect_executor_logs(rd / "control", rd / "logs" / "executors")
        cluster.down()
        if net is not None:
            net.stop()
        history.close()
        nem_hist.close()
        lk.removeHandler(client_log)
        client_log.close()
        signal.signal(signal.SIGINT, prev_int)
        signal.signal(signal.SIGTERM, prev_term)
        if not cfg.keep_data:
            for n in spec.node_specs:
                shutil.rmtree(spec.data_dir / f"node{n.node_id}" / "data", ignore_errors=True)
    timings["total_s"] = round(time.monotonic() - t_start, 1)
    faults = _fault_summary(nem.ops if nem else [])
    result.update({"test": cfg.name, "run_dir": str(rd.path), "seed": cfg.seed, "replay": cfg.replay_command(),
                   "faults": faults, "driver_restarts": sup.restarts() if sup else 0, "timings": timings,
                   "health_after_heal": health})
    rd.write_json("results.json", result)
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
    if result.get("faults"):
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
