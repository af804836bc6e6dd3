"""Class-data sharing archives (backends/common/cds.py): which options a JVM gets, and which dumped archive
is kept. ``promote`` is checked against the real ``java`` (a 0.1-s ``-version`` run per case)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from onceproof import job
from onceproof.backends.common import cds

JAVA = shutil.which("java")
needs_java = pytest.mark.skipif(JAVA is None, reason="no java on PATH")


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ONCEPROOF_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(cds.ENV, raising=False)
    return tmp_path / "cache"


def test_an_archive_is_mapped_only_once_it_exists_and_not_when_turned_off(monkeypatch):
    a = cds.archive("kafka", "/usr/bin/java", "a.jar:b.jar")
    assert cds.options("kafka", "/usr/bin/java", "a.jar:b.jar") == []
    assert cds.missing("kafka", "/usr/bin/java", "a.jar:b.jar")
    a.parent.mkdir(parents=True)
    a.write_bytes(b"x")
    assert cds.options("kafka", "/usr/bin/java", "a.jar:b.jar") == [f"-XX:SharedArchiveFile={a}"]
    assert not cds.missing("kafka", "/usr/bin/java", "a.jar:b.jar")
    monkeypatch.setenv(cds.ENV, "0")
    assert cds.options("kafka", "/usr/bin/java", "a.jar:b.jar") == []
    assert not cds.missing("kafka", "/usr/bin/java", "a.jar:b.jar")  # nothing is made either


def test_each_kind_and_class_path_has_its_own_archive():
    names = {cds.archive(k, "/usr/bin/java", cp) for k in ("kafka", "kafka-tool") for cp in ("a.jar", "b.jar")}
    assert len(names) == 4
    assert cds.archive("kafka", "/usr/bin/java", "a.jar") == cds.archive("kafka", "/usr/bin/java", "a.jar")
    t1, t2 = cds.dump_target("kafka", "/usr/bin/java", "a.jar"), cds.dump_target("kafka", "/usr/bin/java", "a.jar")
    assert t1 != t2 and t1.parent.is_dir() and t1.suffix == ".part"


def test_a_class_path_recreated_at_the_same_place_gets_a_new_archive(tmp_path):
    """A fresh clone's virtualenv at the same directory (CI's) has jars with new times: the JVM would
    refuse the old archive ("The top archive failed to load"), so the key must name a new one."""
    from onceproof.backends.local import spark_cds

    site = tmp_path / "pyspark"
    (site / "jars").mkdir(parents=True)
    jar = site / "jars" / "spark-core.jar"
    jar.write_bytes(b"v1")
    first = spark_cds.key(site, "4.3.0")
    assert spark_cds.key(site, "4.3.0") == first  # same files: same archive
    os.utime(jar, ns=(1, 1))  # the same bytes, installed again later
    again = spark_cds.key(site, "4.3.0")
    assert again != first
    assert cds.archive("spark-driver", "/usr/bin/java", again) != cds.archive("spark-driver", "/usr/bin/java", first)
    jar.write_bytes(b"v22")
    os.utime(jar, ns=(1, 1))
    assert spark_cds.key(site, "4.3.0") != again  # same time, other size
    assert cds.stamp([str(tmp_path / "gone.jar"), str(site)]) == cds.stamp([str(site), str(tmp_path / "gone.jar")])


def _jar(path):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
    return str(path)


def _dump(tmp_path, target) -> str:
    """A real dynamic archive of a ``java -version`` run on a class path of one (empty) jar; the class path."""
    cp = _jar(tmp_path / "a.jar")
    subprocess.run([JAVA, f"-XX:ArchiveClassesAtExit={target}", "-cp", cp, "-version"], capture_output=True,
                   check=True, timeout=60)
    return cp


@needs_java
def test_a_good_archive_is_kept_with_what_it_was_made_for(tmp_path):
    t = cds.dump_target("kafka", JAVA, "k")
    cp = _dump(tmp_path, t)
    line = cds.promote(t, "kafka", JAVA, "k", cp)
    final = cds.archive("kafka", JAVA, "k")
    assert final.is_file() and not t.exists(), line
    assert json.loads(final.with_suffix(".json").read_text())["classpath"] == cp
    assert cds.options("kafka", JAVA, "k") == [f"-XX:SharedArchiveFile={final}"]


@needs_java
@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_a_damaged_or_foreign_archive_is_not_kept(tmp_path, damage):
    t = cds.dump_target("kafka", JAVA, "k")
    cp = _dump(tmp_path, t)
    if damage == "truncated":  # mapping it crashes the JVM (SIGBUS)
        t.chmod(0o644)
        t.write_bytes(t.read_bytes()[: t.stat().st_size // 2])
    elif damage == "garbage":
        t.chmod(0o644)
        t.write_bytes(b"not an archive")
    else:
        t.chmod(0o644)
        t.write_bytes(b"")
    line = cds.promote(t, "kafka", JAVA, "k", cp)
    assert "not" in line
    assert not cds.archive("kafka", JAVA, "k").exists() and not t.exists()
    assert cds.options("kafka", JAVA, "k") == []
    assert not list(t.parent.glob("*hs_err*")) and not list(Path.cwd().glob("hs_err_pid*"))  # no crash report left


def test_the_driver_reads_its_archives_options_from_its_environment():
    env = {"ONCEPROOF_SPARK_CDS": json.dumps({"driver": ["-XX:SharedArchiveFile=/d.jsa"],
                                               "executor": ["-XX:SharedArchiveFile=/e.jsa"]})}
    assert job.class_sharing(env) == {"driver": ["-XX:SharedArchiveFile=/d.jsa"],
                                      "executor": ["-XX:SharedArchiveFile=/e.jsa"]}
    assert job.class_sharing({}) == {}
    assert job.class_sharing({"ONCEPROOF_SPARK_CDS": "{not json"}) == {}
    assert job.class_sharing({"ONCEPROOF_SPARK_CDS": "[1]"}) == {}


def _archive(kind, key, classpath, mtime):
    a = cds.archive(kind, "/usr/bin/java", key)
    a.parent.mkdir(parents=True, exist_ok=True)
    a.write_bytes(b"x")
    a.with_suffix(".json").write_text(json.dumps({"kind": kind, "classpath": classpath}))
    os.utime(a, (mtime, mtime))
    return a


def test_stale_archives_go_and_only_the_newest_few_stay(tmp_path):
    live = tmp_path / "venv-jars"
    live.mkdir()
    (live / "a.jar").write_bytes(b"")
    fresh = [_archive("spark-driver", f"k{i}", f"{live / 'a.jar'}", 1000 + i) for i in range(5)]
    gone_venv = _archive("spark-driver", "old", f"{tmp_path / 'removed-clone' / 'a.jar'}", 5000)
    other_kind = _archive("spark-executor", "k0", f"{tmp_path / 'removed-clone'}", 1)
    tool = _archive("kafka-tool", "k", str(tmp_path / "removed-clone"), 1)
    broker = _archive("kafka", "k", str(live), 1)
    # Spark's class path starts with pyspark/conf, which a pip-installed PySpark does not have: its jar decides
    spark = _archive("spark-executor", "live", f"{tmp_path / 'no-conf-dir'}{os.pathsep}{live / 'a.jar'}", 2)
    removed = cds.prune("spark-driver", keep=3)
    assert set(removed) == {gone_venv, fresh[0], fresh[1]}
    assert all(a.exists() for a in fresh[2:]) and not gone_venv.with_suffix(".json").exists()
    assert other_kind.exists() and tool.exists()  # other kinds are theirs to prune
    assert cds.prune("kafka") == [] and broker.exists() and tool.exists()
    assert cds.prune("kafka-tool") == [tool]
    assert cds.prune("spark-executor") == [other_kind] and spark.exists()


def test_a_class_path_of_wildcards_is_anchored_on_its_jar_directory(tmp_path):
    jars = tmp_path / "pyspark" / "jars"
    assert cds._anchor(f"{tmp_path / 'pyspark' / 'conf'}{os.pathsep}{jars}{os.sep}*") == str(jars)
    assert cds._anchor(f"{tmp_path / 'conf'}{os.pathsep}{jars / 'a.jar'}{os.pathsep}{jars}{os.sep}*") \
        == str(jars / "a.jar")
    assert cds._anchor(str(tmp_path / "classes")) == str(tmp_path / "classes") and cds._anchor("") == ""
    jars.mkdir(parents=True)
    live = _archive("spark-executor", "3.5", f"{tmp_path / 'pyspark' / 'conf'}{os.pathsep}{jars}{os.sep}*", 3)
    assert cds.prune("spark-executor") == [] and live.exists()  # Spark 3.5's executor: its jars are there


def test_the_archive_a_jvm_is_given_outlives_newer_ones_nobody_uses(tmp_path):
    live = tmp_path / "venv-jars"
    live.mkdir()
    (live / "a.jar").write_bytes(b"")
    used = _archive("spark-driver", "checkout", str(live / "a.jar"), 1000)
    newer = [_archive("spark-driver", f"runtime{i}", str(live / "a.jar"), 2000 + i) for i in range(3)]
    assert cds.options("spark-driver", "/usr/bin/java", "checkout") == [f"-XX:SharedArchiveFile={used}"]
    assert set(cds.prune("spark-driver", keep=3)) == {newer[0]} and used.exists()
