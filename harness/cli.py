"""``onceproof``: the command line (Jepsen's ``jepsen.cli``).

Commands: ``run`` (a whole test), ``check`` (a stored run, or any pipeline's live topics), ``cluster``
(``up`` / ``status`` / ``down`` for ad hoc sessions), ``deps`` (resolve the jars ahead of time).
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Prove a PySpark Kafka→Kafka pipeline delivers every record exactly once while "
                       "executors, drivers and brokers fail.")
cluster_app = typer.Typer(no_args_is_help=True, help="A local Kafka cluster for ad hoc sessions.")
app.add_typer(cluster_app, name="cluster")
console = Console(width=None if sys.stdout.isatty() else 120)

DEFAULT_CLUSTER_DIR = Path(".cache/cluster")


@app.command()
def run(
    sink: str = typer.Option("eos", help="eos (transactional sink), at-least-once (Spark's Kafka sink), or "
                                         "eos-no-marker (a mutant without the replay marker check)"),
    nemesis: str = typer.Option("none", help="comma-separated faults (name or name:target), 'all' or "
                                             "'none'. See `onceproof faults`."),
    nemesis_interval: float = typer.Option(10.0, help="seconds between faults (±25%, seeded)"),
    time_limit: float = typer.Option(60.0, help="seconds of workload and faults"),
    rate: float = typer.Option(300.0, help="input records per second"),
    keys: int = typer.Option(50, help="number of workload keys"),
    seed: int = typer.Option(0, help="seeds the workload and the fault schedule; same seed, same schedule"),
    recovery_timeout: float = typer.Option(180.0, help="seconds to wait for the pipeline to catch up"),
    trigger_ms: int = typer.Option(1000, help="micro-batch trigger interval, ms"),
    fault_hold: float = typer.Option(6.0, help="seconds a start/stop fault (pause, partition, delay) stays on"),
    txn_timeout_ms: int = typer.Option(30000, help="the eos sink's transaction.timeout.ms"),
    test_name: str = typer.Option("", help="results/<test-name>/...; default <sink>-<faults>"),
    results: Path = typer.Option(Path("results"), help="results root directory"),
    keep_data: bool = typer.Option(False, help="keep the brokers' data directories after the run"),
    proxy: bool = typer.Option(False, help="run the cluster behind toxiproxy even without network faults "
                                           "(automatic with partition / slow-network)"),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="log harness internals"),
) -> None:
    """Run one test on a fresh local cluster and print the verdict.

    Exit code: 0 valid, 1 invalid, 2 unknown, 255 crashed.
    """
    from harness.config import TestConfig
    from harness.runner import run as run_test
    from nemesis import catalog
    from pipeline.job import SINKS

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING)
    if sink not in SINKS:
        raise typer.BadParameter(f"unknown sink {sink!r}; choose one of {', '.join(SINKS)}", param_hint="--sink")
    try:
        faults = catalog.parse(nemesis)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--nemesis") from None
    for name, v in (("--time-limit", time_limit), ("--rate", rate), ("--keys", keys)):
        if v <= 0:
            raise typer.BadParameter(f"must be > 0, got {v}", param_hint=name)
    from harness import signals

    signals.install()
    cfg = TestConfig(sink=sink, nemesis=faults, nemesis_interval=nemesis_interval, time_limit=time_limit,
                     rate=rate, keys=keys, seed=seed, recovery_timeout=recovery_timeout, trigger_ms=trigger_ms,
                     fault_hold=fault_hold, txn_timeout_ms=txn_timeout_ms, proxy=proxy,
                     test_name=test_name, results_root=results, keep_data=keep_data)
    code, _ = run_test(cfg, console)
    raise typer.Exit(code)


@app.command()
def check(
    run_dir: Optional[Path] = typer.Argument(None, help="a stored run directory (e.g. results/latest)"),
    bootstrap: str = typer.Option("", help="check live topics on this cluster instead"),
    input_topic: str = typer.Option("input"),
    output_topic: str = typer.Option("output"),
    recovery_timeout: float = typer.Option(60.0, help="seconds to wait for open output transactions to end"),
    json_out: bool = typer.Option(False, "--json", help="print the full result as JSON"),
) -> None:
    """Check a stored run offline, or any pipeline's topics live.

    Live contract: Kafka key = workload key (UTF-8); value = JSON object with "key" and "seq" (int,
    contiguous from 0 per key). Provenance headers (op.batch, op.txn_id, ...) are optional.
    """
    from harness import checking, recovery
    from harness.runner import EXIT, summarize

    if (run_dir is None) == (not bootstrap):
        raise typer.BadParameter("give either RUN_DIR or --bootstrap HOST:PORT (not both)")
    try:
        if run_dir is not None:
            if not run_dir.is_dir():
                raise typer.BadParameter(f"{run_dir} is not a directory", param_hint="RUN_DIR")
            result = checking.check_saved(run_dir.resolve())
            result["run_dir"] = str(run_dir.resolve())
        else:
            st = recovery.wait(bootstrap, input_topic, output_topic, None, recovery_timeout)
            result = checking.check_live(bootstrap, input_topic, output_topic, None, st)
    except (checking.CheckError, RuntimeError) as e:
        console.print(f"[red]{e}[/]")
        raise typer.Exit(255)
    if json_out:
        print(json.dumps(result, indent=2, default=str))
    else:
        summarize(result, console)
    raise typer.Exit(EXIT.get(result["verdict"], 255))


@app.command()
def report(run_dir: Path = typer.Argument(..., help="a run directory, e.g. results/latest")) -> None:
    """Rebuild a run's report.html and junit.xml from its files."""
    from harness.junit import write_junit
    from harness.report import build_report

    if not run_dir.is_dir():
        raise typer.BadParameter(f"{run_dir} is not a directory", param_hint="RUN_DIR")
    write_junit(run_dir.resolve())
    console.print(f"report: {build_report(run_dir.resolve())}")


@app.command()
def index(results: Path = typer.Argument(Path("results"), help="results root")) -> None:
    """Write results/index.html: every run with its verdict and a link to its report."""
    from harness.report import build_index

    console.print(f"index: {build_index(results, build_missing=True)}")


@app.command()
def serve(results: Path = typer.Argument(Path("results"), help="results root"),
          port: int = typer.Option(8000, help="TCP port on 127.0.0.1")) -> None:
    """Browse the runs: builds results/index.html and serves the results directory on 127.0.0.1."""
    import functools
    import http.server

    from harness.report import build_index

    build_index(results, build_missing=True)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(results))
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as httpd:
        console.print(f"serving {results} at http://127.0.0.1:{port}/index.html (Ctrl-C to stop)")
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            pass


@app.command()
def faults() -> None:
    """List the faults, their targets and what each one does."""
    from nemesis import catalog

    for name, cls in catalog.FAULTS.items():
        doc = (cls.__doc__ or __import__(cls.__module__, fromlist=["x"]).__doc__ or "").strip()
        targets = ", ".join(getattr(cls, "target_choices", ())) or "-"
        console.print(f"[bold]{name}[/]  targets: {targets}\n  {doc.splitlines()[0] if doc else ''}")


@app.command()
def deps() -> None:
    """Resolve and cache the Kafka broker and Spark connector jars (Maven Central)."""
    from harness import jars

    k = jars.kafka_classpath()
    s = jars.spark_kafka_classpath()
    console.print(f"kafka {k.version}: {len(k.jars)} jars in {k.jars[0].parent}")
    console.print(f"spark-sql-kafka {s.version}: {len(s.jars)} jars in {s.jars[0].parent if s.jars else '-'}")


@cluster_app.command("up")
def cluster_up(
    dir: Path = typer.Option(DEFAULT_CLUSTER_DIR, help="cluster data and state directory"),
    brokers: int = typer.Option(3, help="KRaft nodes (combined broker+controller)"),
) -> None:
    """Start a local KRaft cluster that stays up after this command; prints the bootstrap servers."""
    from harness import processes
    from harness.kafka import ClusterError, ClusterSpec, KafkaCluster, free_base_port

    try:
        existing = KafkaCluster.from_state(dir)
    except ClusterError:
        existing = None
    if existing is not None and any(b.pid and processes.alive(b.pid) for b in existing.brokers.values()):
        console.print(f"[yellow]a cluster is already running from {dir}; run `onceproof cluster down` first[/]")
        raise typer.Exit(1)
    c = KafkaCluster(ClusterSpec(dir.resolve(), nodes=brokers, base_port=free_base_port(brokers)),
                     tie_to_parent=False)
    with console.status("starting Kafka"):
        try:
            c.up()
        except Exception:
            c.down()
            raise
    console.print(f"Kafka {c.version} up: [bold]{c.bootstrap}[/]  (logs: {c.spec.logs})")
    print(c.bootstrap)


@cluster_app.command("status")
def cluster_status(dir: Path = typer.Option(DEFAULT_CLUSTER_DIR)) -> None:
    """Show each broker's pid and whether it is alive."""
    from harness import processes
    from harness.kafka import ClusterError, KafkaCluster

    try:
        c = KafkaCluster.from_state(dir)
    except ClusterError as e:
        console.print(str(e))
        raise typer.Exit(1)
    alive = 0
    for i, b in sorted(c.brokers.items()):
        up = b.pid is not None and processes.alive(b.pid)
        alive += up
        console.print(f"broker {i}: 127.0.0.1:{b.spec.client_port} pid={b.pid} {'up' if up else 'down'}")
    console.print(f"bootstrap: {c.bootstrap}")
    raise typer.Exit(0 if alive == len(c.brokers) else 1)


@cluster_app.command("down")
def cluster_down(dir: Path = typer.Option(DEFAULT_CLUSTER_DIR)) -> None:
    """Stop the cluster started by `cluster up`."""
    from harness.kafka import ClusterError, KafkaCluster

    try:
        c = KafkaCluster.from_state(dir)
    except ClusterError as e:
        console.print(str(e))
        raise typer.Exit(0)
    c.down(graceful=True)
    console.print("cluster stopped")


def main() -> None:  # pragma: no cover - console entry
    app()


if __name__ == "__main__":
    sys.exit(main())
