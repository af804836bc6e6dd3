"""``--backend external`` against a cluster onceproof did not start: the repository's ``docker-compose.yml``
(three KRaft brokers, a Spark master and two workers), brought up here with ``docker compose up`` exactly as
a user would, and ``examples/cluster.toml``'s fault map of ``docker`` commands (only its Compose command,
project and shared directory changed for the test).

* the eos sink stays valid under a broker kill, a driver kill and a driver kill in its commit window,
  each done by the map's command and seen by onceproof itself (a broker stops answering metadata, the
  driver's next incarnation starts);
* the at-least-once sink is caught duplicating after the commit-window kill;
* a topic created before the runs, outside onceproof, has the same records and offsets after them, and no
  topic of the runs is left (only names under the run's prefix were ever created or deleted);
* nothing of the runs is left running (no driver container), and ``docker compose down -v`` removes the rest.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
import uuid

import pytest

from tests.conftest import REPO, load_run, run_cli

pytestmark = pytest.mark.docker

HOST_BOOTSTRAP = "localhost:29091,localhost:29092,localhost:29093"
FOREIGN = "payments-ledger"
"""A topic of "someone else" on the cluster: onceproof must neither read nor write it."""


def _compose(base: list[str], args: list[str], env: dict, timeout: float = 300) -> str:
    p = subprocess.run(base + args, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{' '.join(args)}: exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p.stdout


def _foreign_topic() -> dict:
    """Create :data:`FOREIGN` (2 partitions) with 100 records once the three brokers answer; its snapshot."""
    from confluent_kafka import Producer

    from onceproof.clients import topics

    deadline = time.monotonic() + 180
    while True:
        try:
            if len(topics.admin(HOST_BOOTSTRAP).list_topics(timeout=5).brokers) == 3:
                break
        except Exception:  # noqa: BLE001 - not up yet: polled until the deadline
            pass
        assert time.monotonic() < deadline, "the compose brokers did not come up in 180 s"
        time.sleep(2)
    topics.create_topics(HOST_BOOTSTRAP, {FOREIGN: 2})
    p = Producer({"bootstrap.servers": HOST_BOOTSTRAP, "enable.idempotence": True})
    for i in range(100):
        p.produce(FOREIGN, key=f"k{i % 7}", value=f"entry-{i}", partition=i % 2)
    assert p.flush(30) == 0
    return _snapshot()


def _snapshot() -> dict:
    """Every record of :data:`FOREIGN` as ``(partition, offset, key, value)`` and its end offsets."""
    from confluent_kafka import Consumer, TopicPartition

    from onceproof.clients import topics

    ends = topics.end_offsets(HOST_BOOTSTRAP, FOREIGN)
    c = Consumer({"bootstrap.servers": HOST_BOOTSTRAP, "group.id": f"snapshot-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(FOREIGN, p, 0) for p in ends])
    got: list[tuple] = []
    deadline = time.monotonic() + 60
    while len(got) < sum(ends.values()) and time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is not None and not m.error():
            got.append((m.partition(), m.offset(), m.key(), m.value()))
    c.close()
    return {"ends": dict(ends), "records": sorted(got)}


@pytest.fixture(scope="module")
def compose_cluster(docker_engine, docker_images, tmp_path_factory):
    """The compose cluster up (outside onceproof), its shared run directory, the test's ``cluster.toml``
    and the environment a run needs; ``down -v`` at the end whatever happened."""
    from onceproof.backends.docker.compose import compose_command

    env = {**os.environ, **docker_engine.env()}
    cli = compose_command(env)
    if cli is None:
        pytest.fail("no Compose CLI: `apt-get install docker-compose` (make test does) or `make "
                    "docker-compose-plugin`", pytrace=False)
    project = f"onceproof-ext-{uuid.uuid4().hex[:6]}"
    shared = tmp_path_factory.mktemp("ext") / "shared"
    shared.mkdir()
    compose_file = REPO / "docker-compose.yml"
    run_env = {**docker_engine.env(), "ONCEPROOF_RUN_DIR": str(shared)}
    env.update(run_env)
    base = [*cli, "-f", str(compose_file), "-p", project, "--profile", "spark"]
    text = (REPO / "examples" / "cluster.toml").read_text()
    text = text.replace("docker compose -p", f"{shlex.join(cli)} -f {shlex.quote(str(compose_file))} -p")
    text = text.replace('harness_path = "/srv/onceproof-results"', f'harness_path = "{shared}"')
    text = text.replace('project = "onceproof-ext"', f'project = "{project}"')
    cluster_toml = shared.parent / "cluster.toml"
    cluster_toml.write_text(text)
    try:
        _compose(base, ["up", "-d"], env)
        before = _foreign_topic()
        yield {"toml": cluster_toml, "shared": shared, "env": run_env, "before": before, "project": project,
               "client": docker_engine.client}
    finally:
        subprocess.run(base + ["--profile", "driver", "down", "-v", "--remove-orphans", "-t", "5"], cwd=REPO,
                       env=env, capture_output=True, timeout=300)


def _run(cc: dict, sink: str, nemesis: str, results) -> tuple:
    p = run_cli(["run", "--backend", "external", "--cluster", str(cc["toml"]), "--sink", sink, "--nemesis",
                 nemesis, "--time-limit", "45", "--seed", "1", "--results", str(results)], timeout=1200,
                env=cc["env"])
    return (p, *load_run(results))


def _left(cc: dict) -> list[str]:
    """The run's driver containers still there (named ``<prefix>driver-<n>``)."""
    return [c.name for c in cc["client"].containers.list(all=True) if "driver-" in c.name
            and c.name.startswith("onceproof-")]


@pytest.mark.timeout(1500)
def test_eos_is_valid_on_the_compose_cluster_under_the_fault_maps_kills(compose_cluster):
    cc = compose_cluster
    p, run_dir, result, ops = _run(cc, "eos", "kill-broker,kill-driver,kill-driver-in-commit-window",
                                   cc["shared"] / "results-eos")
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    pipeline = {k: n for k, n in result["counts"].items() if not k.startswith("input-")}
    assert result["verdict"] == "valid" and all(n == 0 for n in pipeline.values()), result["counts"]
    cov = {c["fault"]: c for c in result["coverage"]}
    assert set(cov) == {"kill-broker", "kill-driver", "kill-driver-in-commit-window"}, cov
    assert all(c["planned"] == c["effective"] >= 1 for c in cov.values()), cov
    kill = next(o for o in ops if o.get("type") == "info" and o.get("f", "").startswith("kill-broker"))
    assert kill["outcome"] == "effective", kill
    assert _left(cc) == []
    assert _snapshot() == cc["before"], "the foreign topic changed"


@pytest.mark.timeout(1200)
def test_at_least_once_is_caught_on_the_compose_cluster_and_the_foreign_topic_is_untouched(compose_cluster):
    from onceproof.clients import topics

    cc = compose_cluster
    p, run_dir, result, ops = _run(cc, "at-least-once", "kill-broker,kill-driver-in-commit-window",
                                   cc["shared"] / "results-alo")
    assert p.returncode == 1, p.stdout[-4000:] + p.stderr[-4000:]
    assert result["verdict"] == "invalid" and result["counts"]["duplicate"] > 0, result["counts"]
    assert _left(cc) == []
    assert _snapshot() == cc["before"], "the foreign topic changed"
    names = set(topics.admin(HOST_BOOTSTRAP).list_topics(timeout=10).topics)
    assert FOREIGN in names and not {n for n in names if n.startswith("onceproof-")}, sorted(names)
