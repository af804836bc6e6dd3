"""``--backend external`` against a cluster onceproof did not start: the repository's ``docker-compose.yml``
(three KRaft brokers, a Spark master and two workers), brought up here with ``docker compose up`` exactly as
a user would, and ``examples/cluster.toml``'s fault map of ``docker`` commands (only its Compose command,
project and shared directory changed for the test).

* the eos sink stays valid under a broker kill and a driver kill in its commit window (the map's
  ``pause-driver`` and ``kill-driver`` commands), each done by the map's command and seen by onceproof
  itself (a broker stops answering metadata, the driver's next incarnation starts), run through
  SASL/SCRAM-SHA-512 listeners (``tests/docker/compose-scram.yml``) by the harness and the pipeline alike,
  the password given only through the environment: no file of the run directory (gzipped ones read
  inside) and none of onceproof's output holds it;
* the at-least-once sink is caught duplicating after the commit-window kill, over SASL too (``make
  test-extended``);
* a topic created before the runs, outside onceproof, has the same records and offsets after them, and no
  topic of the runs is left (only names under the run's prefix were ever created or deleted);
* nothing of the runs is left running (no driver container), and ``docker compose down -v`` removes the rest.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
import uuid

import pytest

from tests.conftest import REPO, load_run, run_cli
from tests.docker.test_compose import _compose

pytestmark = pytest.mark.docker

HOST_BOOTSTRAP = "localhost:29091,localhost:29092,localhost:29093"
SCRAM_HOST = "localhost:29191,localhost:29192,localhost:29193"
SCRAM_NET = "kafka1:9094,kafka2:9094,kafka3:9094"
SCRAM_USER = "onceproof"
PASSWORD_ENV = "ONCEPROOF_TEST_KAFKA_PASSWORD"
FOREIGN = "payments-ledger"
"""A topic of "someone else" on the cluster: onceproof must neither read nor write it."""


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

    ends = topics.end_offsets(HOST_BOOTSTRAP, FOREIGN, committed=False)
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
    scram_file = REPO / "tests" / "docker" / "compose-scram.yml"
    base = [*cli, "-f", str(compose_file), "-f", str(scram_file), "-p", project, "--profile", "spark"]
    files = f"-f {shlex.quote(str(compose_file))} -f {shlex.quote(str(scram_file))}"
    text = (REPO / "examples" / "cluster.toml").read_text()
    text = text.replace("docker compose -p", f"{shlex.join(cli)} {files} -p")
    text = text.replace('harness_path = "/srv/onceproof-results"', f'harness_path = "{shared}"')
    text = text.replace('project = "onceproof-ext"', f'project = "{project}"')
    cluster_toml = shared.parent / "cluster.toml"
    cluster_toml.write_text(text)
    scram_toml = shared.parent / "scram.toml"  # the same cluster through its SCRAM listeners
    security = (f'[kafka.security]\nprotocol = "SASL_PLAINTEXT"\nmechanism = "SCRAM-SHA-512"\n'
                f'username = "{SCRAM_USER}"\npassword_env = "{PASSWORD_ENV}"\n\n[kafka.brokers]')
    scram_toml.write_text(text.replace(f'bootstrap = "{HOST_BOOTSTRAP}"', f'bootstrap = "{SCRAM_HOST}"', 1)
                          .replace('bootstrap = "kafka1:9092,kafka2:9092,kafka3:9092"', f'bootstrap = "{SCRAM_NET}"')
                          .replace("[kafka.brokers]", security, 1))
    password = "pw-" + uuid.uuid4().hex  # only ever in this process's memory and the run's environment
    try:
        _compose(base, ["up", "-d"], env)
        before = _foreign_topic()
        _scram_user(password)
        yield {"toml": cluster_toml, "scram_toml": scram_toml, "shared": shared, "env": run_env,
               "password": password, "before": before, "project": project, "client": docker_engine.client}
    finally:
        subprocess.run(base + ["--profile", "driver", "down", "-v", "--remove-orphans", "-t", "5"], cwd=REPO,
                       env=env, capture_output=True, timeout=300)


def _scram_user(password: str) -> None:
    """SCRAM-SHA-512 credentials for :data:`SCRAM_USER`, set over the PLAINTEXT listener (Admin API,
    AlterUserScramCredentials: KIP-554)."""
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    from onceproof.clients import topics

    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    a = topics.admin(HOST_BOOTSTRAP)  # held until the futures resolve
    futs = a.alter_user_scram_credentials([UserScramCredentialUpsertion(SCRAM_USER, info, password.encode())])
    for f in futs.values():
        f.result(timeout=60)


def _run(cc: dict, sink: str, nemesis: str, results, toml: str = "toml", env: dict | None = None,
         time_limit: int = 45) -> tuple:
    p = run_cli(["run", "--backend", "external", "--cluster", str(cc[toml]), "--sink", sink, "--nemesis",
                 nemesis, "--time-limit", str(time_limit), "--seed", "1", "--results", str(results)], timeout=1200,
                env={**cc["env"], **(env or {})})
    return (p, *load_run(results))


def _files_holding(root, secret: str) -> list[str]:
    """Files under ``root`` whose bytes (a ``.gz`` file's uncompressed ones) contain ``secret``."""
    import gzip

    out = []
    for f in root.rglob("*"):
        if f.is_file():
            data = gzip.decompress(f.read_bytes()) if f.suffix == ".gz" else f.read_bytes()
            if secret.encode() in data:
                out.append(str(f))
    return out


def _left(cc: dict) -> list[str]:
    """The run's driver containers still there (named ``<prefix>driver-<n>``)."""
    return [c.name for c in cc["client"].containers.list(all=True) if "driver-" in c.name
            and c.name.startswith("onceproof-")]


@pytest.mark.timeout(1500)
def test_eos_is_valid_on_the_compose_cluster_under_the_fault_maps_kills_over_sasl_with_no_secret_in_the_run(
        compose_cluster):
    """Through the SASL/SCRAM listeners, the password only in the environment: valid under the fault map's
    broker kill and commit-window driver kill, and the password in no file of the run nor in its output."""
    cc = compose_cluster
    p, run_dir, result, ops = _run(cc, "eos", "kill-broker,kill-driver-in-commit-window", cc["shared"] / "results-eos",
                                   toml="scram_toml", env={PASSWORD_ENV: cc["password"]})
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    versions = json.loads((run_dir / "test.json").read_text())["versions"]
    assert versions["security"] == "SASL_PLAINTEXT", versions  # the harness's clients; the pipeline's SASLINT
    assert _files_holding(run_dir, cc["password"]) == [] and cc["password"] not in p.stdout + p.stderr
    pipeline = {k: n for k, n in result["counts"].items() if not k.startswith("input-")}
    assert result["verdict"] == "valid" and all(n == 0 for n in pipeline.values()), result["counts"]
    cov = {c["fault"]: c for c in result["coverage"]}
    assert set(cov) == {"kill-broker", "kill-driver-in-commit-window"}, cov
    assert all(c["planned"] == c["effective"] >= 1 for c in cov.values()), cov
    kill = next(o for o in ops if o.get("type") == "info" and o.get("f", "").startswith("kill-broker"))
    assert kill["outcome"] == "effective", kill
    assert result["driver_restarts"] >= 1, result["driver_restarts"]  # the map's kill-driver, restarted by submit
    assert _left(cc) == []
    assert _snapshot() == cc["before"], "the foreign topic changed"
    from onceproof.clients import topics
    names = set(topics.admin(HOST_BOOTSTRAP).list_topics(timeout=10).topics)
    assert FOREIGN in names and not {n for n in names if n.startswith("onceproof-")}, sorted(names)


@pytest.mark.extended  # 96-99 s; make test's eos run above carries the SASL and secret claims
@pytest.mark.timeout(1200)
def test_at_least_once_is_caught_over_sasl_scram_with_no_secret_in_the_run_and_the_foreign_topic_untouched(
        compose_cluster):
    from onceproof.clients import topics

    cc = compose_cluster
    # the commit-window kill alone: its replay is the duplicate (the broker kill, which waits for the
    # driver's recovery, is the eos run's above and would add about 30 s here)
    p, run_dir, result, ops = _run(cc, "at-least-once", "kill-driver-in-commit-window",
                                   cc["shared"] / "results-alo", toml="scram_toml",
                                   env={PASSWORD_ENV: cc["password"]}, time_limit=30)
    assert p.returncode == 1, p.stdout[-4000:] + p.stderr[-4000:]
    assert result["verdict"] == "invalid" and result["counts"]["duplicate"] > 0, result["counts"]
    versions = json.loads((run_dir / "test.json").read_text())["versions"]
    assert versions["security"] == "SASL_PLAINTEXT", versions  # the harness's clients; the pipeline's SASLINT
    assert _files_holding(run_dir, cc["password"]) == [] and cc["password"] not in p.stdout + p.stderr
    assert (run_dir / "logs").exists() and any((run_dir / "logs").iterdir())
    assert _left(cc) == []
    assert _snapshot() == cc["before"], "the foreign topic changed"
    names = set(topics.admin(HOST_BOOTSTRAP).list_topics(timeout=10).topics)
    assert FOREIGN in names and not {n for n in names if n.startswith("onceproof-")}, sorted(names)
