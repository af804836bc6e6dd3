"""``--backend docker`` end to end, on the engine that answers (``backends/docker/engine.py``) with the
images built (the session fixtures of ``tests/conftest.py`` start an engine and build them when
needed): the exactly-once sink stays valid under executor kills, broker
kills and pauses and partitions; the at-least-once sink is caught duplicating the counter workload's
aggregates after a driver kill in the commit window; ``onceproof cluster up|status|down --backend docker``
attach by label, on another Kafka release (3.5.2, older than the official image's wrapper) whose brokers
commit and abort transactions. Every test
also checks that none of its containers (nor its network, nor a process of its run) is left.

Each full run takes 3–6 minutes on 2 cores at the engine's nice 19.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.conftest import NEWEST_KAFKA, assert_rolled, load_run, our_processes, run_cli

pytestmark = pytest.mark.docker


@pytest.fixture
def needs_engine(docker_engine, docker_images):
    """The session's engine with the images built (``tests/conftest.py``)."""
    return docker_engine


def _run_id(run_dir: Path) -> str:
    return json.loads((run_dir / "cluster" / "cluster.json").read_text())["run_id"]


def _docker_left(run_id: str) -> list[str]:
    """``docker ps -a`` and ``docker network ls`` of run ``run_id`` (by its label): one line each."""
    out = []
    for cmd, name in ((["docker", "ps", "-a"], "{{.Names}}"), (["docker", "network", "ls"], "{{.Name}}")):
        p = subprocess.run(cmd + ["--filter", f"label=org.onceproof.run={run_id}", "--format", name],
                           capture_output=True, text=True, timeout=60, check=True)
        out += p.stdout.split()
    return out


def _ops(ops: list[dict]) -> list[dict]:
    return [o for o in ops if o.get("type") == "info" and o.get("f") != "heal"]


@pytest.mark.usefixtures("needs_engine")
@pytest.mark.timeout(1800)
def test_eos_is_valid_under_executor_and_broker_kills_pauses_and_partitions(results_root):
    p = run_cli(["run", "--backend", "docker", "--sink", "eos", "--nemesis",
                 "kill-executor,kill-broker,pause-broker,partition", "--time-limit", "60", "--seed", "1",
                 "--results", str(results_root)], timeout=1500)
    run_dir, result, ops = load_run(results_root)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    assert result["verdict"] == "valid", result
    assert all(n == 0 for n in result["counts"].values()), result["counts"]
    done = _ops(ops)
    assert {o["f"].partition(":")[0] for o in done} >= {"kill-executor", "kill-broker", "pause-broker", "partition"}
    assert all(o["outcome"] == "effective" for o in done), [(o["f"], o["outcome"], o.get("evidence")) for o in done]
    for o in done:
        ev = o["evidence"]
        if o["f"] == "kill-executor":
            assert ev["gone_after"] and ev["retried_by"], ev
        elif o["f"].startswith("pause-broker"):
            assert all(v["status_paused"] == "stopped" for v in ev["paused"].values()), ev
        elif o["f"].startswith("partition"):
            assert not ev["probe_during"]["ok"] and ev["probe_after"]["ok"], ev
            if ev["variant"] == "isolate":  # the node's own attachment to the network was cut
                assert ev["paths"] == [f"node-{ev['node']}"] and ev["disabled"] == ev["paths"], ev
    assert result["health_after_heal"]["healthy"], result["health_after_heal"]
    assert not _docker_left(_run_id(run_dir))
    assert not our_processes(str(run_dir))


@pytest.mark.usefixtures("needs_engine")
@pytest.mark.extended
@pytest.mark.timeout(1500)
def test_at_least_once_duplicates_after_a_driver_kill_in_the_commit_window(results_root):
    """Also issue 9's stateful catch, folded in to save a cluster run in ``make test``: the counter
    workload (Spark state, update mode) through the at-least-once sink. The replayed micro-batch's
    aggregates are emitted again: ``duplicate`` (``checkers/counter.py``), each example naming the
    batch that wrote the second copy."""
    p = run_cli(["run", "--backend", "docker", "--workload", "counter", "--sink", "at-least-once", "--nemesis",
                 "kill-driver-in-commit-window", "--time-limit", "30", "--seed", "1", "--results",
                 str(results_root)], timeout=1200)
    run_dir, result, ops = load_run(results_root)
    assert p.returncode == 1, p.stdout[-4000:] + p.stderr[-4000:]
    assert result["verdict"] == "invalid" and result["counts"]["duplicate"] > 0, result["counts"]
    assert result["workload"] == "counter" and not any(
        n for a, n in result["counts"].items() if a.startswith("state-")), result["counts"]
    window = [o for o in _ops(ops) if o["outcome"] == "effective"]
    assert window, ops
    for o in window:  # the kill landed between the sink's write and Spark's commit log
        ev = o["evidence"]
        assert ev["offsets_logged"] and not ev["commit_logged_after_kill"] and ev["driver_gone"], ev
    replayed = {str(o["evidence"]["batch"]) for o in window}
    copies = {str(ex.get("batch")) for ex in result["anomalies"]["duplicate"]}
    assert copies & replayed, (copies, replayed)
    assert result["driver_restarts"] >= len(window)
    assert not _docker_left(_run_id(run_dir))
    assert not our_processes(str(run_dir))


@pytest.mark.usefixtures("needs_engine")
@pytest.mark.extended
@pytest.mark.timeout(1500)
def test_the_postgres_sink_in_its_container_is_valid_and_the_container_goes_with_the_run(results_root):
    """``--sink postgres`` on the Docker backend: the server is the ``onceproof/postgres`` container on the
    run's network (the driver writes to ``postgres:5432``, the reader to its published host port), under a
    driver kill in the commit window and a broker kill; valid, every input record once in the table, the
    server's log in the run's ``logs/``, and no container left."""
    p = run_cli(["run", "--backend", "docker", "--sink", "postgres", "--nemesis",
                 "kill-driver-in-commit-window,kill-broker", "--time-limit", "40", "--seed", "1",
                 "--results", str(results_root)], timeout=1200)
    run_dir, result, ops = load_run(results_root)
    out = p.stdout[-4000:] + p.stderr[-4000:]
    assert p.returncode == 0 and result["verdict"] == "valid", (result.get("verdict"), result.get("counts"), out)
    assert result["postgres"]["rows"] == result["stats"]["input_records"] > 0, result["postgres"]
    cw = [o for o in _ops(ops) if o["f"] == "kill-driver-in-commit-window"]
    assert cw and cw[0]["outcome"] == "effective", cw
    log = (run_dir / "logs" / "postgres.log").read_text()
    assert "database system is ready to accept connections" in log, log[-2000:]
    assert not _docker_left(_run_id(run_dir))
    assert not our_processes(str(run_dir))


def _transaction_read_back(bootstrap: str, n: int = 100) -> list[int]:
    """Commit ``n`` records in one transaction to a new 3-way topic, abort as many more, and return what a
    ``read_committed`` consumer reads back (the values, sorted)."""
    topic, txid = f"t-{uuid.uuid4().hex[:8]}", f"tx-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(60)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txid})
    p.init_transactions(60)
    for commit, values in ((True, range(n)), (False, range(n, 2 * n))):
        p.begin_transaction()
        for k in values:
            p.produce(topic, value=str(k).encode())
        (p.commit_transaction if commit else p.abort_transaction)(60)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": txid, "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    c.subscribe([topic])
    got: list[int] = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and len(got) < n:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got.append(int(m.value()))
        for _ in range(3):  # what an aborted transaction left visible would come now
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got.append(int(m.value()))
    finally:
        c.close()
    return sorted(got)


@pytest.mark.usefixtures("needs_engine")
def test_cluster_up_on_another_kafka_release_status_down_attach_by_label(tmp_path):
    """``--kafka-version 3.5.2``: its own kafka image (built on first use), a release without the official
    image's configuration wrapper; its brokers commit and abort transactions as Kafka says."""
    d = tmp_path / "cluster"
    up = run_cli(["cluster", "up", "--backend", "docker", "--dir", str(d), "--kafka-version", "3.5.2"], timeout=300)
    try:
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        assert "Kafka 3.5.2 up" in up.stdout, up.stdout
        bootstrap = up.stdout.strip().splitlines()[-1]
        assert bootstrap.count("127.0.0.1:") == 3, up.stdout
        run_id = json.loads((d / "cluster.json").read_text())["run_id"]
        assert len(_docker_left(run_id)) == 4  # 3 brokers and the network
        logs = subprocess.run(["docker", "logs", f"onceproof-{run_id}-kafka1"], capture_output=True, text=True,
                              timeout=60)
        assert "Kafka version: 3.5.2" in logs.stdout + logs.stderr, (logs.stdout + logs.stderr)[-2000:]
        assert _transaction_read_back(bootstrap) == list(range(100))
        st = run_cli(["cluster", "status", "--backend", "docker", "--dir", str(d)], timeout=120)
        assert st.returncode == 0 and st.stdout.count(" up") == 3, st.stdout + st.stderr
    finally:
        down = run_cli(["cluster", "down", "--backend", "docker", "--dir", str(d)], timeout=180)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not _docker_left(run_id)
    st = run_cli(["cluster", "status", "--backend", "docker", "--dir", str(d)], timeout=120)
    assert st.returncode == 1


@pytest.mark.usefixtures("needs_engine")
@pytest.mark.extended
@pytest.mark.timeout(1500)
def test_eos_is_valid_while_the_brokers_roll_to_the_newest_release_in_their_containers(results_root):
    """``rolling-upgrade`` on Docker: brokers on 3.9.1's image, each in turn stopped, given the newest
    release's jars through its release mount and started again in the same container, on its own data."""
    frm, to = "3.9.1", NEWEST_KAFKA
    p = run_cli(["run", "--backend", "docker", "--sink", "eos", "--nemesis", "rolling-upgrade,kill-executor",
                 "--kafka-version", frm, "--kafka-upgrade-to", to, "--time-limit", "40", "--seed", "1",
                 "--results", str(results_root)], timeout=1300)
    run_dir, result, ops = load_run(results_root)
    assert p.returncode == 0 and result["verdict"] == "valid", (result["counts"], p.stdout[-4000:] + p.stderr[-3000:])
    assert_rolled(ops, frm, to)
    assert not _docker_left(_run_id(run_dir))
    assert not our_processes(str(run_dir))
