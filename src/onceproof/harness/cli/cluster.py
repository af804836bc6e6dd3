"""The commands on a backend's cluster outside a run: ``cluster up|status|down`` (a detached Kafka cluster
for ad hoc sessions, its state in ``--dir``) and ``deps`` (fetch what the backend's runs need). Backends:
``backends/registry.py``."""

from __future__ import annotations

from pathlib import Path

import typer

from onceproof.backends import registry
from onceproof.backends.base import FOREIGN, Backend, BackendError, Cluster, ClusterError, ClusterShape
from onceproof.backends.cache import cache_dir
from onceproof.backends.common import jars
from onceproof.harness.cli.app import console, on_crash, usage
from onceproof.harness.config import kafka_release_refusal

DEFAULT_CLUSTER_DIR = cache_dir() / "cluster"
_BACKEND_HELP = "the backend that runs the cluster: " + ", ".join(registry.names())
_DIR_HELP = ("cluster data and state directory (default: $ONCEPROOF_CACHE/cluster, i.e. "
             "~/.cache/onceproof/cluster, whatever the working directory)")

cluster_app = typer.Typer(no_args_is_help=True, help="A local Kafka cluster for ad hoc sessions.")


def _backend(name: str) -> Backend:
    """The backend called ``name``; a usage error (254) naming the known ones otherwise."""
    try:
        return registry.get(name)
    except BackendError as e:
        raise usage(str(e), "--backend") from None


def _attach(b: Backend, dir: Path) -> Cluster | None:
    """The detached cluster in ``dir``, or ``None`` (with the reason on the console) when there is none."""
    try:
        return b.attach(dir)
    except ClusterError as e:
        console.print(str(e), soft_wrap=True)
        return None


def deps(backend: str = typer.Option(registry.DEFAULT, help=_BACKEND_HELP)) -> None:
    """Fetch what a backend's runs need ahead of time (local: the Kafka broker and Spark connector jars,
    from Maven Central, and the class-data sharing archives that start the brokers' and Spark's JVMs
    faster)."""
    on_crash("deps", None)
    for line in _backend(backend).prepare():
        console.print(line)


@cluster_app.command("up")
def cluster_up(
    dir: Path = typer.Option(DEFAULT_CLUSTER_DIR, help=_DIR_HELP),
    brokers: int = typer.Option(3, help="KRaft nodes (combined broker+controller), 1..9"),
    backend: str = typer.Option(registry.DEFAULT, help=_BACKEND_HELP),
    kafka_version: str = typer.Option("", help="the Apache Kafka release the brokers run, X.Y.Z from "
                                               f"{jars.SUPPORTED_KAFKA} (default: ${jars.KAFKA_VERSION_ENV}, "
                                               "else the pinned release)"),
) -> None:
    """Start a KRaft cluster that stays up after this command; prints the bootstrap servers. Runs use it
    with `onceproof run --warm-cluster DIR` (local backend): no broker start or stop of their own."""
    on_crash("cluster up", None)
    if not 1 <= brokers <= 9:
        raise usage(f"must be 1..9, got {brokers}", "--brokers")
    b = _backend(backend)
    if kafka_version and (why := jars.kafka_version_problem(kafka_version) or kafka_release_refusal(b)):
        raise usage(why, "--kafka-version")
    try:
        existing = b.attach(dir)
    except ClusterError:
        existing = None
    if existing is not None and any(existing.state(n).alive for n in existing.nodes):
        console.print(f"[yellow]a cluster is already running from {dir}; run `onceproof cluster down` first[/]")
        raise typer.Exit(1)
    owner = str(dir.resolve()) if b.warm_clusters else ""  # its brokers outlive the runs that use it
    c = b.cluster(ClusterShape(dir.resolve(), nodes=brokers, detached=True, kafka_version=kafka_version, owner=owner))
    on_crash("cluster up", c.log_dir / "cluster-up-error.log")
    with console.status("starting Kafka"):
        try:
            c.up()
        except BaseException:
            c.down()
            raise
    console.print(f"Kafka {c.version} up: [bold]{c.bootstrap}[/]  (logs: {c.log_dir})", soft_wrap=True)
    print(c.bootstrap)


@cluster_app.command("status")
def cluster_status(dir: Path = typer.Option(DEFAULT_CLUSTER_DIR, help=_DIR_HELP),
                   backend: str = typer.Option(registry.DEFAULT, help=_BACKEND_HELP)) -> None:
    """Show each broker's pid and whether it is alive. Exit 0 when every broker is up, else 1."""
    on_crash("cluster status", None)
    c = _attach(_backend(backend), dir)
    if c is None:
        raise typer.Exit(1)
    alive = 0
    for i in c.nodes:
        st = c.state(i)
        alive += st.alive
        state = "up" if st.alive else ("stale: that pid is not this cluster's broker" if st.status == FOREIGN
                                       else "down")
        console.print(f"broker {i}: {c.address(i)} pid={st.pid} {state}")
    console.print(f"bootstrap: {c.bootstrap}  (state: {c.state_file})", soft_wrap=True)
    raise typer.Exit(0 if alive == len(c.nodes) else 1)


@cluster_app.command("down")
def cluster_down(dir: Path = typer.Option(DEFAULT_CLUSTER_DIR, help=_DIR_HELP),
                 backend: str = typer.Option(registry.DEFAULT, help=_BACKEND_HELP)) -> None:
    """Stop the cluster started by `cluster up`. Only processes whose command line shows they are this
    cluster's brokers are signalled; a stale pid in the state file is left alone."""
    on_crash("cluster down", None)
    c = _attach(_backend(backend), dir)
    if c is None:
        raise typer.Exit(0)
    stale = c.down(graceful=True)
    for i, pid in stale:
        console.print(f"[yellow]broker {i}: pid {pid} is not this cluster's broker (stale state): left alone[/]")
    console.print("cluster stopped")
