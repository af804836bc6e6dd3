"""``docker-compose.yml`` runs: Kafka (3 KRaft brokers) and Spark (a standalone master and 2 workers,
profile ``spark``) come up from the locally built images, the bundled pipeline runs as the one-off ``spark-driver``
service on the compose network exactly as the file's header documents, the keyed workload writes the input from
the host (CLIENT listeners, ``localhost:29091-29093``) while the pipeline runs, and ``onceproof check
--bootstrap`` judges the live topics ``valid``. ``docker compose down -v`` then leaves no container,
network or volume of the project.

Uses Compose v2 (``docker compose``) or Debian's v1 (``docker-compose``), whichever answers
(``onceproof.backends.docker.compose.compose_command``). About 3 minutes on 2 cores.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

pytestmark = pytest.mark.docker

HOST_BOOTSTRAP = "localhost:29091,localhost:29092,localhost:29093"
NET_BOOTSTRAP = "kafka1:9092,kafka2:9092,kafka3:9092"
PARTITIONS = 3


def _compose(base: list[str], args: list[str], env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    p = subprocess.run(base + args, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{' '.join(args)}: exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


def _project_objects(client, project: str) -> list[str]:
    """Containers, networks and volumes labelled with Compose project ``project`` (v1 and v2 both label)."""
    label = {"label": f"com.docker.compose.project={project}"}
    return ([f"container {c.name}" for c in client.containers.list(all=True, filters=label)]
            + [f"network {n.name}" for n in client.networks.list(filters=label)]
            + [f"volume {v.name}" for v in client.volumes.list(filters=label)])


def _create_topics_when_up(timeout_s: float = 180) -> None:
    """Create the pipeline's topics once all three brokers answer (a fresh KRaft quorum takes a while)."""
    from onceproof.clients import topics

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if len(topics.admin(HOST_BOOTSTRAP).list_topics(timeout=5).brokers) == 3:
                topics.create_topics(HOST_BOOTSTRAP, {"input": PARTITIONS, "output": PARTITIONS,
                                                      "output-progress": 1})
                return
        except Exception as e:  # noqa: BLE001 - not up yet: retried until the deadline
            if time.monotonic() > deadline:
                raise AssertionError(f"the compose brokers did not come up in {timeout_s:.0f}s: {e}") from e
        if time.monotonic() > deadline:
            raise AssertionError(f"fewer than 3 compose brokers answered in {timeout_s:.0f}s")
        time.sleep(2)


@contextlib.contextmanager
def _workload(history: Path, rate: float):
    """The keyed workload writing the input through the host listeners for the block; yields its stats."""
    from onceproof.store.history import HistoryWriter
    from onceproof.workloads.keyed import KeyedWorkload

    h = HistoryWriter(history)
    w = KeyedWorkload(HOST_BOOTSTRAP, "input", h, rate=rate, keys=20, seed=1)
    try:
        w.start()
        yield w
    finally:
        w.stop()
        h.close()


def _committed_output(timeout_s: float, alive) -> int:
    """Wait until the output topic holds committed records (the driver's first micro-batch); returns the
    sum of its LSOs, or 0 after ``timeout_s`` or once ``alive()`` (the driver container runs) is False."""
    from onceproof.clients import topics

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and alive():
        try:
            lso = sum(topics.end_offsets(HOST_BOOTSTRAP, "output", committed=True).values())
            if lso > 0:
                return lso
        except Exception:  # noqa: BLE001 - a transient metadata error: poll again
            pass
        time.sleep(3)
    return 0


@pytest.mark.extended
@pytest.mark.timeout(900)
def test_compose_kafka_and_spark_run_the_pipeline_and_check_bootstrap_says_valid(docker_engine, docker_images,
                                                                                 tmp_path):
    from onceproof.backends.docker.compose import compose_command
    from onceproof.backends.docker.driver import driver_command

    env = {**os.environ, **docker_engine.env()}
    cli = compose_command(env)
    if cli is None:
        pytest.fail("no Compose CLI: `apt-get install docker-compose` (make test does) or `make "
                    "docker-compose-plugin`", pytrace=False)
    project = f"onceproof-test-{uuid.uuid4().hex[:8]}"
    base = [*cli, "-f", str(REPO / "docker-compose.yml"), "-p", project, "--profile", "spark"]
    client = docker_engine.client
    driver = f"{project}-driver"

    def logs() -> str:
        try:
            return client.containers.get(driver).logs().decode(errors="replace")[-4000:]
        except Exception as e:  # noqa: BLE001 - the driver's log is only a diagnostic
            return f"(no driver log: {e})"

    try:
        config = _compose(base, ["config"], env, timeout=60).stdout
        assert all(s in config for s in ("kafka1", "kafka2", "kafka3", "spark-master", "spark-worker2"))
        _compose(base, ["up", "-d"], env)
        _create_topics_when_up()
        with _workload(tmp_path / "history.jsonl", rate=200) as w:
            time.sleep(5)  # input before the pipeline starts, and (below) while it runs
            argv = ["--bootstrap", NET_BOOTSTRAP, "--master", "spark://spark-master:7077", "--sink", "eos",
                    "--checkpoint", f"/var/lib/onceproof/{project}/ckpt",
                    "--control-dir", f"/var/lib/onceproof/{project}/control"]
            _compose(base, ["run", "-d", "--no-deps", "--name", driver, "-e", "ONCEPROOF_DRIVER_LOG=/dev/stdout",
                            "spark-driver", *driver_command(argv)], env)
            first = _committed_output(300, lambda: client.containers.get(driver).status == "running")
            assert first > 0, "the pipeline committed no output (300 s at most):\n" + logs()
            time.sleep(8)
        assert w.stats.ok > 2000 and w.stats.fail == 0, (w.stats, w.errors[-5:])
        results = tmp_path / "results"
        p = run_cli(["check", "--bootstrap", HOST_BOOTSTRAP, "--settle", "10", "--recovery-timeout", "240",
                     "--results", str(results), "--json"], timeout=400)
        r = json.loads(p.stdout[p.stdout.index("{"):]) if "{" in p.stdout else {}
        assert p.returncode == 0 and r.get("verdict") == "valid", (p.stderr[-3000:], r.get("counts"), logs())
        assert r["stats"]["input_records"] == r["stats"]["output_records"] == w.stats.ok, (r["stats"], w.stats)
        assert all(n == 0 for n in r["counts"].values()), r["counts"]
        assert (Path(r["run_dir"]) / "report.html").exists()
    finally:
        try:
            client.containers.get(driver).remove(force=True)  # a `run` one-off: not every `down` removes it
        except Exception:  # noqa: BLE001 - never started, or gone
            pass
        down = subprocess.run(base + ["down", "-v", "--remove-orphans", "-t", "5"], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=300)
    assert down.returncode == 0, down.stdout + down.stderr
    assert _project_objects(client, project) == []
