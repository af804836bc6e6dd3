"""``--pipeline-python``: a user's job on its own interpreter. The probe asks real interpreters (this one,
with PySpark; the system's, without); the refusal rules and the connector's version run on synthetic
values."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from onceproof.backends.common import interpreter, jars
from onceproof.harness.config import ConfigError, TestConfig

JOB = "{python} job.py --bootstrap {bootstrap} --checkpoint {checkpoint} --jars {jars}"


def test_the_probe_reads_this_interpreters_pyspark_and_scala():
    import pyspark

    i = interpreter.probe(sys.executable)
    assert i.pyspark_version == pyspark.__version__
    assert i.pyspark_dir == Path(pyspark.__file__).resolve().parent
    assert i.scala == "2.13" and i.jars_dir.is_dir()
    assert i.python_version.startswith(f"{sys.version_info[0]}.{sys.version_info[1]}.")
    assert interpreter.refusal(i) is None


def test_a_missing_interpreter_or_one_without_pyspark_names_the_fix(tmp_path):
    with pytest.raises(interpreter.InterpreterError, match="no such interpreter"):
        interpreter.probe(str(tmp_path / "bin" / "python"))
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\nexit 0\n")
    with pytest.raises(interpreter.InterpreterError, match="not executable"):
        interpreter.probe(str(script))
    script.chmod(0o755)
    with pytest.raises(interpreter.InterpreterError, match="not a Python interpreter"):
        interpreter.probe(str(script))


@pytest.mark.skipif(not shutil.which("python3", path="/usr/bin"), reason="no system python3 in /usr/bin")
def test_an_interpreter_without_pyspark_is_told_how_to_install_it():
    probe = "import pyspark"
    if interpreter.subprocess.run(["/usr/bin/python3", "-c", probe], capture_output=True).returncode == 0:
        pytest.skip("the system python3 has pyspark")
    with pytest.raises(interpreter.InterpreterError, match=r"cannot import pyspark .*-m pip install 'pyspark>=4"):
        interpreter.probe("/usr/bin/python3")


def _interp(version: str, scala: str, jars_dir: Path) -> interpreter.Interpreter:
    return interpreter.Interpreter("/venv/bin/python", "3.12.1", version, jars_dir.parent, scala)


def test_a_spark_older_than_3_5_or_other_scala_jars_than_its_line_ships_are_refused(tmp_path):
    (tmp_path / "jars").mkdir()
    assert "Spark 3.5 and 4.x" in interpreter.refusal(_interp("3.4.4", "2.12", tmp_path / "jars"))
    assert interpreter.refusal(_interp("3.5.4", "2.12", tmp_path / "jars")) is None
    assert "for Scala 2.12" in interpreter.refusal(_interp("3.5.4", "2.13", tmp_path / "jars"))
    assert "Scala 2.12" in interpreter.refusal(_interp("4.1.0", "2.12", tmp_path / "jars"))
    assert interpreter.refusal(_interp("4.1.0", "2.13", tmp_path / "jars")) is None
    assert "no jars directory" in interpreter.refusal(_interp("4.1.0", "2.13", tmp_path / "none" / "jars"))


def test_the_scala_version_comes_from_the_scala_library_jar(tmp_path):
    (tmp_path / "scala-library-2.13.16.jar").write_bytes(b"")
    (tmp_path / "scala-reflect-2.13.16.jar").write_bytes(b"")
    assert interpreter.scala_of(tmp_path) == "2.13"
    assert interpreter.scala_of(tmp_path / "missing") == ""


def test_the_connector_is_the_pinned_one_for_its_spark_minor_or_newer_and_the_sparks_own_for_an_older():
    pinned = jars.connector_version()
    major, minor = (int(x) for x in pinned.split(".")[:2])
    assert jars.connector_version(pinned) == pinned
    assert jars.connector_version(f"{major}.{minor}.9") == pinned
    assert jars.connector_version(f"{major}.{minor + 1}.0") == pinned
    older = f"{major}.{minor - 1}.1"
    assert jars.connector_version(older) == older


def test_pipeline_python_needs_a_users_job_and_an_interpreter_that_can_run_it(tmp_path):
    with pytest.raises(ConfigError, match="--pipeline-python.*for a --pipeline-cmd job"):
        TestConfig(pipeline_python=sys.executable, nemesis=["kill-driver-in-commit-window"]).validate()
    with pytest.raises(ConfigError, match="--pipeline-python.*no such interpreter"):
        TestConfig(pipeline_cmd=JOB, pipeline_python=str(tmp_path / "python"),
                   nemesis=["kill-driver-in-commit-window"]).validate()
    cfg = TestConfig(pipeline_cmd=JOB, pipeline_python=sys.executable,
                     nemesis=["kill-driver-in-commit-window"]).validate()
    assert cfg.pipeline_python == sys.executable


def test_the_probe_reads_a_delta_spark_package_and_its_pyspark_requirement(tmp_path, monkeypatch):
    """A delta-spark distribution (its metadata only) on the interpreter's path is seen with its version and
    its pyspark requirement, and pins the Delta jars' version."""
    info = tmp_path / "delta_spark-4.3.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: delta-spark\nVersion: 4.3.1\n"
                                   "Requires-Dist: pyspark<4.2.0,>=4.1.0\nRequires-Dist: importlib-metadata>=1.0\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    interpreter.probe.cache_clear()
    try:
        i = interpreter.probe(sys.executable)
    finally:
        interpreter.probe.cache_clear()
    assert i.packages == (("delta-spark", "4.3.1", ("pyspark<4.2.0,>=4.1.0",)),)
    assert i.deps_versions == {"delta": "4.3.1"}


def _with_delta(pyspark: str, requires: str, jars_dir: Path) -> interpreter.Interpreter:
    return interpreter.Interpreter("/venv/bin/python", "3.12.1", pyspark, jars_dir.parent, "2.13",
                                   (("delta-spark", "4.4.0", (requires,)),))


def test_a_jobs_delta_spark_must_fit_its_pyspark_and_a_spark_line_delta_builds_for(tmp_path):
    assert jars.spark_lines("delta") == ["4.0", "4.1", "4.2"] and jars.spark_lines("kafka") == []
    ok = _with_delta("4.2.0", "pyspark<4.3.0,>=4.2.0", tmp_path / "jars")
    assert interpreter.deps_refusal(ok, ("delta",)) is None
    wrong = _with_delta("4.3.0", "pyspark<4.3.0,>=4.2.0", tmp_path / "jars")
    assert "needs pyspark<4.3.0,>=4.2.0" in interpreter.deps_refusal(wrong, ("delta",))
    assert interpreter.deps_refusal(wrong, ()) is None  # not an output that carries Delta's jars
    no_build = _with_delta("4.3.0", "pyspark>=4.3.0", tmp_path / "jars")
    assert "builds for Spark 4.0, 4.1, 4.2 only" in interpreter.deps_refusal(no_build, ("delta",))
    without = _interp("4.3.0", "2.13", tmp_path / "jars")  # a delta-rs job: nothing to match
    assert interpreter.deps_refusal(without, ("delta",)) is None


def test_delta_jars_are_asked_for_the_jobs_spark_line_and_none_exist_for_4_3():
    with pytest.raises(jars.NoBuildForSpark, match="no build for Spark 4.3"):
        jars.deps_classpath("delta", spark_version="4.3.0")


def test_a_patch_maven_lacks_falls_back_to_the_newest_served_patch_of_its_line_once(tmp_path, monkeypatch):
    served = {"4.1.2", "4.1.3"}  # a synthetic repository: what Maven would find
    asked = []

    def resolve(name, version, pom, props):
        asked.append(version)
        if version not in served:
            raise jars.NotServed(f"{name}:jar:{version} was not found in https://repo.maven.apache.org/maven2")
        return jars.Classpath(name, version, ())

    monkeypatch.setenv("ONCEPROOF_CACHE", str(tmp_path))
    monkeypatch.setattr(jars, "_resolve", resolve)
    pom = tmp_path / "pom.xml"
    assert jars.served_patch("spark-sql-kafka", "4.1.5", pom, "p") == "4.1.3"
    assert asked == ["4.1.5", "4.1.4", "4.1.3"]
    assert jars.served_patch("spark-sql-kafka", "4.1.5", pom, "p") == "4.1.3" and len(asked) == 3  # remembered
    assert jars.served_patch("spark-sql-kafka", "4.1.2", pom, "p") == "4.1.2"
    with pytest.raises(jars.ResolveError, match="no spark-sql-kafka on the 4.0 line up to 4.0.1"):
        jars.served_patch("spark-sql-kafka", "4.0.1", pom, "p")

    def offline(name, version, pom, props):
        raise jars.ResolveError("Maven could not resolve: network")

    monkeypatch.setattr(jars, "_resolve", offline)  # a network failure is not a missing patch: no step down
    with pytest.raises(jars.ResolveError, match="network"):
        jars.served_patch("spark-sql-kafka", "4.1.9", pom, "p")


def test_the_connector_of_a_pyspark_patch_that_maven_may_lack_comes_from_maven_central():
    # PyPI had pyspark 4.1.4 while Maven Central had spark-sql-kafka 4.1.x only up to 4.1.3 (2026-11-28)
    cp = jars.spark_kafka_classpath(spark_version="4.1.4")
    assert jars.major_minor(cp.version) == (4, 1) and jars.version_tuple(cp.version) <= (4, 1, 4), cp.version
    assert any(j.name == f"spark-sql-kafka-0-10_2.13-{cp.version}.jar" for j in cp.jars), cp.jars


def test_a_spark_3_5_job_gets_the_scala_2_12_connector_of_its_line():
    cp = jars.spark_kafka_classpath(pyspark_jars=Path("/nonexistent"), spark_version="3.5.9")
    assert jars.major_minor(cp.version) == (3, 5) and jars.version_tuple(cp.version) <= (3, 5, 9), cp.version
    names = {j.name for j in cp.jars}
    assert f"spark-sql-kafka-0-10_2.12-{cp.version}.jar" in names, names
    assert f"spark-token-provider-kafka-0-10_2.12-{jars.SPARK35_TOKEN}.jar" in names, names
