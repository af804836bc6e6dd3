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
from onceproof.backends.docker.images import ImageBuildError, _Entry, recipe_hash

REPO = Path(__file__).resolve().parents[2]


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
    from onceproof.backends.common import jars

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


