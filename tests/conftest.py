"""Shared fixtures: the real CLI as a subprocess, and a check that no JVM of ours is left behind."""

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "src" / "onceproof"
ONCEPROOF = [sys.executable, "-m", "onceproof.harness.cli"]
NEWEST_KAFKA = "4.4.0"
"""The newest Kafka release Maven Central serves (2026-11-25; docs/versions.md): the fault-family eos run starts
its brokers on it (``make test`` holds an eos run on the newest supported release, the oldest and the pin), and
the rolling-upgrade runs roll to it (``make test-oldest``'s ``UPGRADE_KAFKA``, ``test_rolling_upgrade.py``)."""


def our_processes(marker: str, exclude: set[int] | None = None) -> list[psutil.Process]:
    """Live processes whose command line or ``ONCEPROOF_RUN`` environment names ``marker`` (a run's
    directory): brokers, toxiproxy, the Python driver and its JVM, executor JVMs, and PySpark's Python
    daemon and workers (all inherit ``ONCEPROOF_RUN``). This test process, its ancestors and ``exclude``
    (e.g. the harness under test while it is still expected to run) do not count."""
    me = psutil.Process()
    skip = {me.pid, *(a.pid for a in me.parents()), *(exclude or ())}
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if p.pid in skip or p.status() == psutil.STATUS_ZOMBIE:
                continue
            cmd = " ".join(p.info["cmdline"] or [])
            env = p.environ().get("ONCEPROOF_RUN", "")
            if marker in cmd or marker in env:
                out.append(p)
        except psutil.Error:
            continue
    return out


def our_jvms(marker: str) -> list[psutil.Process]:
    """The Java processes among :func:`our_processes`."""
    out = []
    for p in our_processes(marker):
        try:
            if "java" in p.name():
                out.append(p)
        except psutil.Error:
            continue
    return out


def run_cli(args: list[str], timeout: float = 900, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``onceproof ARGS`` from the repository, output captured; ``env`` added to this process's environment."""
    env = dict(os.environ, COLUMNS="160", **(env or {}))
    return subprocess.run(ONCEPROOF + args, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def run_table_sink(results: Path, sink: str, extra: list[str] | tuple[str, ...] = (),
                   nemesis: str = "kill-driver-in-commit-window,kill-broker", time_limit: int = 40
                   ) -> tuple[Path, dict, dict, str]:
    """``onceproof run --sink SINK`` under ``nemesis`` (seed 1, ``time_limit`` s, ``extra`` options added),
    asserting what every table sink's run must show whatever its verdict: no process of the run left, the
    driver killed in a commit window before Spark logged the commit, and the broker kill exercised when
    ``nemesis`` has one. A weak sink's run needs the commit-window kill alone: its replay is the duplicate,
    and a broker kill, which waits for the driver's recovery, adds about 30 s and nothing to what it shows.
    Returns (run dir, results.json, the commit-window kill's evidence, the CLI's output)."""
    p = run_cli(["run", "--sink", sink, "--nemesis", nemesis, "--seed", "1", "--time-limit", str(time_limit),
                 "--results", str(results), *extra], timeout=1200)
    out = p.stdout + p.stderr
    assert p.returncode != 254, out[-3000:]
    run_dir, result, ops = load_run(results)
    assert not our_processes(str(run_dir)), "a process of the run outlived it"
    cw = [o for o in ops if o.get("type") == "info" and o.get("f") == "kill-driver-in-commit-window"]
    assert cw and cw[0]["outcome"] == "effective" and cw[0]["exercised"], (cw, out[-3000:])
    assert not cw[0]["evidence"]["commit_logged_after_kill"], cw[0]["evidence"]
    if "kill-broker" in nemesis:
        kb = [o for o in ops if o.get("type") == "info" and str(o.get("f")).startswith("kill-broker")]
        assert kb and kb[0]["exercised"], (kb, out[-3000:])
    return run_dir, result, cw[0]["evidence"], out


def load_run(results_root: Path) -> tuple[Path, dict, list[dict]]:
    """(run dir, results.json, nemesis ops) of the newest run under ``results_root``."""
    return load_run_dir((results_root / "latest").resolve())


def load_run_dir(run_dir: Path) -> tuple[Path, dict, list[dict]]:
    """(run dir, results.json, nemesis ops as dicts) of one run directory."""
    result = json.loads((run_dir / "results.json").read_text())
    ops = [json.loads(line) for line in (run_dir / "nemesis.jsonl").read_text().splitlines() if line.strip()]
    return run_dir, result, ops


def assert_rolled(ops: list[dict], frm: str, to: str) -> dict:
    """The ``rolling-upgrade`` turn of ``ops``, asserted effective and exercised: all three brokers moved
    from ``frm``, each back in sync, cleanly stopped and logging ``to``, and ``metadata.version`` finalized
    on ``to``'s line. Returns its evidence."""
    roll = next(o for o in ops if o.get("type") == "info" and o.get("f") == "rolling-upgrade")
    assert roll["outcome"] == "effective" and roll["exercised"], roll
    ev = roll["evidence"]
    assert set(ev["from"].values()) == {frm} and len(ev["brokers"]) == 3, ev
    assert all(b["logged_version"] == to and b["clean"] and b["in_sync_after_s"] is not None
               for b in ev["brokers"].values()), ev["brokers"]
    assert ev["features_after"]["metadata.version"].startswith(".".join(to.split(".")[:2]) + "-"), ev
    return ev


@pytest.fixture(scope="session")
def warm_cluster(tmp_path_factory):
    """``["--warm-cluster", DIR]`` for ``onceproof run``: one warm cluster for the session's runs of the plain
    shape (``harness/warm.py``: 3 brokers of the pinned release, behind toxiproxy, each in a cgroup of its
    own), started at its first use and stopped with its reaper at the session's end; a SIGKILLed pytest's
    reaper sweeps its brokers. A run that needs another shape starts its own cluster and says why."""
    from onceproof.backends import registry  # lazy: a unit-test session never starts one
    from onceproof.harness import warm

    owned = warm.start(registry.get("local"), tmp_path_factory.mktemp("warm-cluster"), proxied=True, own_groups=True)
    try:
        yield ["--warm-cluster", str(owned.data_dir)]
    finally:
        owned.stop()


@pytest.fixture
def results_root(tmp_path):
    return tmp_path / "results"


@pytest.fixture(scope="module")
def spark():
    """A local[2] SparkSession for a module of ``spark_local`` tests (no cluster, no Kafka)."""
    pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    # settings for a few hundred rows: C1-only JIT and the serial GC (the JVM warms up in 5 s, not 20 s,
    # as onceproof/pipeline/jvm.py's SPARK_JAVA_OPTS), no whole-stage codegen (each query would compile its own
    # classes) and no adaptive re-planning; two shuffle partitions
    s = (SparkSession.builder.master("local[2]").appName("onceproof-tests")
         .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.shuffle.partitions", "2").config("spark.default.parallelism", "2")
         .config("spark.sql.codegen.wholeStage", "false").config("spark.sql.adaptive.enabled", "false")
         .config("spark.driver.memory", "1g").getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A real 3-broker KRaft cluster shared by one test module (started once per module, always stopped)."""
    from onceproof.backends.common.layout import ClusterSpec
    from onceproof.backends.common.ports import free_base_port
    from onceproof.backends.local.kafka import KafkaCluster

    c = KafkaCluster(ClusterSpec(tmp_path_factory.mktemp("kafka"), base_port=free_base_port()))
    try:
        c.up()
        yield c
    finally:
        c.down()


DOCKER_REQUIRE_ENV = "ONCEPROOF_TEST_DOCKER"
"""``ONCEPROOF_TEST_DOCKER=require`` (``make test`` sets it): a Docker test whose engine or images cannot be
had *fails* with the reason instead of being skipped, so CI cannot pass by testing nothing."""


def _docker_unavailable(why: str):
    if os.environ.get(DOCKER_REQUIRE_ENV) == "require":
        pytest.fail(f"{why} ({DOCKER_REQUIRE_ENV}=require: `make test` needs Docker; `make unit` does not)",
                    pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="session")
def docker_engine():
    """The Docker engine of the whole session (``onceproof.backends.docker.engine.DockerEngine``): the running one,
    or a ``dockerd`` started for the session and stopped at its end. Skipped when none can be had (no
    root, no ``dockerd``), failed instead under ``ONCEPROOF_TEST_DOCKER=require``."""
    from onceproof.backends.docker.engine import DockerEngine, EngineError

    try:
        eng = DockerEngine().start()
    except EngineError as e:
        _docker_unavailable(f"no Docker engine: {e}")
    try:
        yield eng
    finally:
        eng.stop()  # only a daemon this fixture started


@pytest.fixture(scope="session")
def docker_images(docker_engine):
    """onceproof's images (``onceproof.backends.docker.images.build``), by name → ``Built``: found by their
    content-hash tags, or built (about 2.5 min on an empty engine, 2 cores), progress on stdout."""
    from onceproof.backends.docker import images

    try:
        return {b.name: b for b in images.build(docker_engine.client, log=lambda m: print(m, flush=True))}
    except images.ImageBuildError as e:
        _docker_unavailable(f"the Docker images could not be built: {e} (make docker-images)")
