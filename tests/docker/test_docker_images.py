"""The docker half of ``tests/unit/test_docker_images.py``: tests that need a Docker engine."""

from __future__ import annotations

import pytest

from onceproof.backends.docker import images
from onceproof.backends.docker.images import _Entry, _Recipe
from tests.unit.test_docker_images import REPO, _run, built, engine  # noqa: F401 (fixtures are used by name)


@pytest.mark.docker
def test_second_build_is_a_no_op_and_a_content_change_rebuilds(engine, tmp_path, monkeypatch):
    """A tiny FROM-scratch recipe (no base, no network): cache by tag, rebuild on change."""
    client = engine.client
    df = tmp_path / "Dockerfile"
    df.write_text("FROM scratch\nCOPY hello /hello\n")
    r1 = _Recipe("selftest", "0", df, [_Entry("hello", data=b"one")], {})
    r2 = _Recipe("selftest", "0", df, [_Entry("hello", data=b"two")], {})
    tags = []
    try:
        a = images._build_recipe(client, r1, force=False, log=lambda m: None, sha_cache={})
        tags.append(a.tag)
        assert a.built and a.tag.startswith("onceproof/selftest:0-")
        b = images._build_recipe(client, r1, force=False, log=lambda m: None, sha_cache={})
        assert not b.built and b.tag == a.tag and b.image_id == a.image_id
        assert b.seconds < 2.0
        c = images._build_recipe(client, r2, force=False, log=lambda m: None, sha_cache={})
        tags.append(c.tag)
        assert c.built and c.tag != a.tag
        assert client.images.get("onceproof/selftest:0").id == c.image_id, "the alias follows the newest"
        assert [t for i in client.images.list(name="onceproof/selftest") for t in i.tags
                if t.startswith("onceproof/selftest:0-")] == [c.tag], "an earlier build's tag is dropped"
        labels = client.images.get(c.tag).labels
        assert labels["org.onceproof.hash"].startswith(c.tag.rsplit("-", 1)[1])
    finally:
        for t in [*tags, "onceproof/selftest:0"]:
            try:
                client.images.remove(t, force=True)
            except Exception:  # noqa: BLE001 - already gone
                pass


@pytest.mark.docker
def test_build_again_is_a_no_op(engine, built):
    again = images.build(engine.client, log=lambda m: None)
    assert [b.name for b in again] == ["base", "jre", "kafka", "spark", "toxiproxy", "postgres", "node"]
    assert not any(b.built for b in again)
    assert [b.tag for b in again] == [built[b.name].tag for b in again]
    assert sum(b.seconds for b in again) < 30


@pytest.mark.docker
def test_java_17_in_jre_kafka_and_spark(engine, built):
    for name in ("jre", "kafka", "spark"):
        out = _run(engine, built[name].tag, ["-version"], entrypoint=["java"])
        assert 'version "17.' in out, f"{name}: {out}"


def _setup_env(**more: str) -> dict[str, str]:
    """A one-node KRaft configuration in the apache/kafka image's environment convention, set up only."""
    return {"ONCEPROOF_KAFKA_SETUP_ONLY": "1", "CLUSTER_ID": "MkU3OEVBNTcwNTJENDM2Qg",
            "KAFKA_NODE_ID": "2", "KAFKA_PROCESS_ROLES": "broker,controller",
            "KAFKA_CONTROLLER_QUORUM_VOTERS": "2@localhost:9093", "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
            "KAFKA_LISTENERS": "CLIENT://:29092,CONTROLLER://:9093",
            "KAFKA_ADVERTISED_LISTENERS": "CLIENT://localhost:29092", "KAFKA_INTER_BROKER_LISTENER_NAME": "CLIENT",
            "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "CLIENT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "KAFKA_LOG_DIRS": "/var/lib/kafka/data", **more}


def _properties(out: str) -> dict[str, list[str]]:
    """``key → [values]`` of the ``key=value`` lines of ``out`` (a key set twice has two values)."""
    props: dict[str, list[str]] = {}
    for line in out.splitlines():
        key, eq, value = line.partition("=")
        if eq and key and " " not in key:
            props.setdefault(key, []).append(value)
    return props


@pytest.mark.docker
def test_kafka_image_tools_and_env_configuration(engine, built):
    tag = built["kafka"].tag
    assert "The Kafka storage tool" in _run(engine, tag, ["--help"], entrypoint=["kafka-storage.sh"])
    env = _setup_env(KAFKA_MIN_INSYNC_REPLICAS="2", KAFKA_HEAP_OPTS="-Xmx300m", KAFKA_A___B__C="x")
    out = _run(engine, tag, None, environment=env)  # the entrypoint, stopped before the broker
    assert "Formatting metadata directory /var/lib/kafka/data" in out, out
    props = _properties(out)
    for key, value in (("node.id", "2"), ("min.insync.replicas", "2"), ("inter.broker.listener.name", "CLIENT"),
                       ("a-b_c", "x")):  # "___" is "-", "__" is "_"
        assert props.get(key) == [value], out
    assert not any("heap" in k for k in props), "a JVM setting is not a broker property"
    no_id = engine.client.containers.run(tag, None, detach=True)
    try:
        assert no_id.wait(timeout=60)["StatusCode"] == 2
        assert b"set CLUSTER_ID" in no_id.logs()
    finally:
        no_id.remove(force=True)


@pytest.mark.docker
def test_an_older_release_gets_an_image_of_its_own_configured_from_a_mounted_file_and_the_env(engine, built,
                                                                                             tmp_path):
    """Kafka 3.5.2 has no ``KafkaDockerWrapper`` (3.7+): the entrypoint configures it alone, the environment
    winning over a mounted ``server.properties`` key by key."""
    b = images.build(engine.client, ["kafka"], kafka_version="3.5.2", log=lambda m: None)[-1]
    assert b.alias == "onceproof/kafka:3.5.2", b
    assert "kafka_2.13-3.5.2.jar" in _run(engine, b.tag, ["-c", "ls /opt/kafka/libs"], entrypoint=["sh"])
    (tmp_path / "server.properties").write_text("min.insync.replicas=1\nnum.partitions=7\n")
    out = _run(engine, b.tag, None, environment=_setup_env(KAFKA_MIN_INSYNC_REPLICAS="2"),
               volumes={str(tmp_path): {"bind": "/mnt/shared/config", "mode": "ro"}})
    assert "Formatting /var/lib/kafka/data with metadata.version 3.5-IV2" in out, out
    props = _properties(out)
    assert props["min.insync.replicas"] == ["2"] and props["num.partitions"] == ["7"], out


@pytest.mark.docker
def test_spark_image_has_the_drivers_python_packages_and_runs_the_pipeline_imports(engine, built):
    reqs = images.python_requirements()
    out = _run(engine, built["spark"].tag, ["python", "-c",
               "import sys, pyspark, py4j, confluent_kafka; from importlib.metadata import version as v; "
               "print(sys.version_info[:2], v('pyspark'), v('py4j'), v('confluent-kafka'))"])
    assert out.strip() == f"(3, 11) {reqs['pyspark']} {reqs['py4j']} {reqs['confluent-kafka']}"
    # what the executors import (cloudpickle references pipeline.* by module), from the repository mounted
    out = _run(engine, built["spark"].tag,
               ["python", "-c", "import onceproof.job, onceproof.pipeline.transactional_sink, "
                "onceproof.pipeline.marker, onceproof.pipeline.completeness, onceproof.pipeline.hooks; print('ok')"],
               volumes={str(REPO / "src"): {"bind": "/src", "mode": "ro"}}, environment={"PYTHONPATH": "/src"})
    assert out.strip() == "ok"
    out = _run(engine, built["spark"].tag, ["sh", "-c", "ls $SPARK_HOME/bin/spark-class /opt/onceproof/spark-kafka"])
    assert "spark-class" in out and "spark-sql-kafka-0-10" in out


@pytest.mark.docker
def test_toxiproxy_image_runs_the_harness_build(engine, built):
    from onceproof.backends.common.toxiproxy import TOXIPROXY_VERSION

    out = _run(engine, built["toxiproxy"].tag, ["-version"])
    assert f"version {TOXIPROXY_VERSION.lstrip('v')}" in out


