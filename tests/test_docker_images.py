"""backends/docker/images.py: content-hash tags, build contexts, and the images themselves.

The first tests need no engine. Those marked ``docker`` use the session's engine and images
(``tests/conftest.py``: the running engine or a dockerd started for the session; the images built when
their tags are missing, minutes the first time, a no-op after; skipped when impossible, failed under
``ONCEPROOF_TEST_DOCKER=require``). The smoke tests run one
trivial command per image; no broker, Spark master or worker is started.
"""

import tarfile
import time
from importlib import metadata
from pathlib import Path

import pytest

from onceproof.backends.docker import images
from onceproof.backends.docker.images import ImageBuildError, _Entry, _Recipe, recipe_hash

REPO = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------------------------ no engine

def test_recipe_hash_covers_dockerfile_context_and_buildargs(tmp_path):
    f = tmp_path / "a.jar"
    f.write_bytes(b"one")
    entries = [_Entry("libs/a.jar", path=f), _Entry("x/run", data=b"#!/bin/sh\n", mode=0o755)]
    h = recipe_hash("FROM x\n", entries, {"BASE": "b:1"})
    assert h == recipe_hash("FROM x\n", list(reversed(entries)), {"BASE": "b:1"}), "order must not matter"
    assert h != recipe_hash("FROM y\n", entries, {"BASE": "b:1"})
    assert h != recipe_hash("FROM x\n", entries, {"BASE": "b:2"}), "a rebuilt base must change the tag"
    assert h != recipe_hash("FROM x\n", entries[:1], {"BASE": "b:1"})
    assert h != recipe_hash("FROM x\n", [entries[0], _Entry("x/run", data=b"#!/bin/sh\n", mode=0o644)],
                            {"BASE": "b:1"}), "a mode change must change the tag"
    time.sleep(0.01)
    f.write_bytes(b"two")  # same name, new content (the sha cache keys on size/mtime/inode)
    assert h != recipe_hash("FROM x\n", entries, {"BASE": "b:1"}, cache={})
    pinned = [_Entry("wheels/p.whl", path=tmp_path / "absent.whl", hash_by="p==1")]
    assert recipe_hash("F", pinned, {}) != recipe_hash("F", [_Entry("wheels/p.whl", hash_by="p==2")], {})


def test_context_tar_has_the_dockerfile_entries_modes_and_a_fixed_mtime(tmp_path):
    df = tmp_path / "Dockerfile"
    df.write_text("FROM scratch\n")
    jar = tmp_path / "k.jar"
    jar.write_bytes(b"jar")
    out = tmp_path / "ctx.tar"
    images._write_context(out, df, [_Entry("libs/k.jar", path=jar), _Entry("bin/run", data=b"x", mode=0o755),
                                    _Entry("empty/")])
    with tarfile.open(out) as t:
        m = {i.name: i for i in t.getmembers()}
        assert t.extractfile("Dockerfile").read() == b"FROM scratch\n"
        assert t.extractfile("libs/k.jar").read() == b"jar"
        assert m["bin/run"].mode == 0o755 and m["libs/k.jar"].mode == 0o644
        assert m["empty"].isdir() and m["libs"].isdir()
        assert {i.mtime for i in m.values()} == {images.CONTEXT_MTIME}
        assert {i.uid for i in m.values()} == {0}


def test_python_requirements_are_the_drivers_installed_versions_and_the_lock_pins_them():
    lock = dict(line.split("==", 1) for line in (REPO / "constraints.txt").read_text().split() if "==" in line)
    reqs = images.python_requirements()
    for name in ("pyspark", "confluent-kafka", "py4j"):
        assert reqs[name] == metadata.version(name), "the cluster must run the driver's versions"
    # make setup installs from the lock, so a checkout's images carry exactly the locked versions
    assert reqs["pyspark"] == lock["pyspark"] and reqs["confluent-kafka"] == lock["confluent-kafka"]


def test_kafka_context_carries_the_resolved_jars_or_none_on_the_official_image():
    from onceproof.backends.local import jars

    local = images._kafka_recipe("onceproof/jre:17-x", None)
    got = sorted(e.path for e in local.entries if e.arcname.startswith("libs/"))
    assert got == sorted(jars.kafka_classpath().jars), "the image must run the jars the harness resolves"
    assert local.buildargs == {"BASE": "onceproof/jre:17-x", "RUN_AS": "root"}
    official = images._kafka_recipe(None, "apache/kafka:4.1.1")
    assert [e.arcname for e in official.entries if e.arcname.startswith("libs")] == ["libs/"]
    assert official.buildargs == {"BASE": "apache/kafka:4.1.1", "RUN_AS": "appuser"}
    assert official.version.endswith("-official") and official.version != local.version


def test_unknown_image_name_is_refused():
    with pytest.raises(ImageBuildError, match="choose from"):
        images.build(None, ["kafak"])


# -------------------------------------------------------------------------------------- with an engine

@pytest.fixture(scope="module")
def engine(docker_engine):
    """The session's engine (``tests/conftest.py``)."""
    return docker_engine


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


@pytest.fixture(scope="module")
def built(docker_images):
    """Every image (built when missing; cached otherwise), by name: the session's (``tests/conftest.py``)."""
    return docker_images


def _run(engine, image: str, cmd, **kw) -> str:
    """Output (stdout and stderr) of ``cmd`` in a throwaway container; the container is removed even when
    it could not start (``containers.run(remove=True)`` leaves it then)."""
    c = engine.client.containers.create(image, cmd, **kw)
    try:
        c.start()
        rc = c.wait(timeout=120)["StatusCode"]
        out = c.logs(stdout=True, stderr=True).decode(errors="replace")
        assert rc == 0, f"{image} {cmd}: exit {rc}\n{out}"
        return out
    finally:
        c.remove(force=True)


@pytest.mark.docker
def test_build_again_is_a_no_op(engine, built):
    again = images.build(engine.client, log=lambda m: None)
    assert [b.name for b in again] == ["base", "jre", "kafka", "spark", "toxiproxy"]
    assert not any(b.built for b in again)
    assert [b.tag for b in again] == [built[b.name].tag for b in again]
    assert sum(b.seconds for b in again) < 30


@pytest.mark.docker
def test_java_17_in_jre_kafka_and_spark(engine, built):
    for name in ("jre", "kafka", "spark"):
        out = _run(engine, built[name].tag, ["-version"], entrypoint=["java"])
        assert 'version "17.' in out, f"{name}: {out}"


@pytest.mark.docker
def test_kafka_image_tools_and_env_configuration(engine, built):
    tag = built["kafka"].tag
    assert "The Kafka storage tool" in _run(engine, tag, ["--help"], entrypoint=["kafka-storage.sh"])
    env = {"ONCEPROOF_KAFKA_SETUP_ONLY": "1", "CLUSTER_ID": "b25jZXByb29mLWNsdXN0ZXI",
           "KAFKA_NODE_ID": "2", "KAFKA_PROCESS_ROLES": "broker,controller",
           "KAFKA_CONTROLLER_QUORUM_VOTERS": "2@localhost:9093", "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
           "KAFKA_LISTENERS": "CLIENT://:29092,CONTROLLER://:9093",
           "KAFKA_ADVERTISED_LISTENERS": "CLIENT://localhost:29092", "KAFKA_INTER_BROKER_LISTENER_NAME": "CLIENT",
           "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "CLIENT:PLAINTEXT,CONTROLLER:PLAINTEXT",
           "KAFKA_MIN_INSYNC_REPLICAS": "2", "KAFKA_LOG_DIRS": "/var/lib/kafka/data"}
    out = _run(engine, tag, None, environment=env)  # the entrypoint, stopped before the broker
    assert "Formatting metadata directory /var/lib/kafka/data" in out, out
    for line in ("node.id=2", "min.insync.replicas=2", "inter.broker.listener.name=CLIENT"):
        assert line in out.splitlines(), out
    no_id = engine.client.containers.run(tag, None, detach=True)
    try:
        assert no_id.wait(timeout=60)["StatusCode"] == 2
        assert b"set CLUSTER_ID" in no_id.logs()
    finally:
        no_id.remove(force=True)


@pytest.mark.docker
def test_spark_image_has_the_drivers_python_packages_and_runs_the_pipeline_imports(engine, built):
    reqs = images.python_requirements()
    out = _run(engine, built["spark"].tag, ["python", "-c",
               "import sys, pyspark, py4j, confluent_kafka; from importlib.metadata import version as v; "
               "print(sys.version_info[:2], v('pyspark'), v('py4j'), v('confluent-kafka'))"])
    assert out.strip() == f"(3, 11) {reqs['pyspark']} {reqs['py4j']} {reqs['confluent-kafka']}"
    # what the executors import (cloudpickle references pipeline.* by module), from the repository mounted
    out = _run(engine, built["spark"].tag, ["python", "-c", "import onceproof.pipeline.job, onceproof.pipeline.transactional_sink, "
               "onceproof.pipeline.marker, onceproof.pipeline.completeness, onceproof.pipeline.hooks; print('ok')"],
               volumes={str(REPO): {"bind": "/src", "mode": "ro"}}, environment={"PYTHONPATH": "/src"})
    assert out.strip() == "ok"
    out = _run(engine, built["spark"].tag, ["sh", "-c", "ls $SPARK_HOME/bin/spark-class /opt/onceproof/spark-kafka"])
    assert "spark-class" in out and "spark-sql-kafka-0-10" in out


@pytest.mark.docker
def test_toxiproxy_image_runs_the_harness_build(engine, built):
    from onceproof.backends.local.toxiproxy import TOXIPROXY_VERSION

    out = _run(engine, built["toxiproxy"].tag, ["-version"])
    assert f"version {TOXIPROXY_VERSION.lstrip('v')}" in out
