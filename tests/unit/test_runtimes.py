"""The second PySpark runtime's cache (``backends/local/runtimes.py``): built once, atomically, never used
half-built, pointed at the harness's environment.

Pure logic over a synthetic ``pyspark`` package: the installer is the test's (it writes a two-line
``pyspark/__init__.py`` instead of running pip), while the virtualenv, the ``.pth`` and the check that the
runtime's interpreter imports that ``pyspark`` and the harness's ``confluent_kafka`` are real. Nothing
here downloads PySpark; the real build is what ``upgrade:pyspark`` does on first use.
"""

from __future__ import annotations

import fcntl
import subprocess
from pathlib import Path

import pytest

from onceproof.backends.local import runtimes
from onceproof.backends.local.runtimes import RuntimeBuildError

TRAIN = runtimes.train_class_sharing
"""The real trainer, which the autouse ``trained`` fixture stands in for in every test."""


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ONCEPROOF_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(runtimes.PREVIOUS_ENV, raising=False)
    return tmp_path / "cache"


@pytest.fixture(autouse=True)
def trained(monkeypatch) -> list:
    """The runtimes :func:`runtimes.ensure` asked to train (a synthetic PySpark runs no Spark)."""
    got: list = []
    monkeypatch.setattr(runtimes, "train_class_sharing", lambda rt: got.append(rt.version) or [])
    return got


def test_every_ensure_asks_for_the_runtimes_archives_which_train_only_when_missing(trained):
    rt = runtimes.ensure("9.8.7", install=fake_install([]))
    runtimes.ensure("9.8.7", install=fake_install([]))
    assert trained == ["9.8.7", "9.8.7"]  # spark_cds.train_archives returns [] when both archives exist
    assert rt.pyspark_dir == rt.site_packages / "pyspark"


def test_a_failed_training_run_is_a_line_not_an_error(monkeypatch):
    from onceproof.backends.local import spark_cds

    calls = []

    def fail(python, pyspark_dir, version):
        calls.append((python, pyspark_dir, version))
        raise RuntimeError("the Spark class-data sharing training run failed (exit 1)")

    monkeypatch.setattr(spark_cds, "train_archives", fail)
    rt = runtimes.Runtime("9.8.7", Path("/cache/runtimes/pyspark-9.8.7"))
    lines = TRAIN(rt)
    assert calls == [(str(rt.python), rt.pyspark_dir, "9.8.7")], calls
    assert len(lines) == 1 and "not made" in lines[0] and "exit 1" in lines[0], lines


def fake_install(calls: list, version_written: str | None = None):
    def install(site: Path, version: str) -> None:
        calls.append(version)
        (site / "pyspark").mkdir()
        (site / "pyspark" / "__init__.py").write_text(f"__version__ = {version_written or version!r}\n")
        (site / "py4j").mkdir()
        (site / "py4j" / "__init__.py").write_text("")
    return install


def test_a_runtime_is_built_once_and_imports_its_own_pyspark_and_the_harness_packages(cache):
    calls: list = []
    rt = runtimes.ensure("9.8.7", install=fake_install(calls))
    assert rt.root == cache / "runtimes" / "pyspark-9.8.7" and (rt.root / ".complete").read_text() == "9.8.7\n"
    assert (rt.site_packages / runtimes.PTH_NAME).read_text() == runtimes.pth_line(runtimes.harness_site_packages())
    out = subprocess.run([str(rt.python), "-c", "import pyspark, confluent_kafka; print(pyspark.__version__)"],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "9.8.7", out.stderr
    assert not list((cache / "runtimes").glob("*.partial")), "the build directory was left behind"
    assert runtimes.ensure("9.8.7", install=fake_install(calls)) == rt and calls == ["9.8.7"], "built twice"


def test_a_failed_install_leaves_nothing_and_says_what_to_do(cache):
    def install(site: Path, version: str) -> None:
        runtimes._run(["false"], f"installing PySpark {version}", 10)

    with pytest.raises(RuntimeBuildError) as e:
        runtimes.ensure("9.8.7", install=install)
    assert "installing PySpark 9.8.7 failed" in str(e.value) and "PyPI" in str(e.value)
    assert runtimes.PREVIOUS_ENV in str(e.value)
    assert sorted(p.name for p in (cache / "runtimes").iterdir()) == ["pyspark-9.8.7.lock"]


def test_a_runtime_that_imports_another_pyspark_is_refused_and_not_kept(cache):
    with pytest.raises(RuntimeBuildError, match="imports pyspark 1.0.0"):
        runtimes.ensure("9.8.7", install=fake_install([], version_written="1.0.0"))
    assert not (cache / "runtimes" / "pyspark-9.8.7").exists()


def test_a_half_built_runtime_is_never_used_but_rebuilt(cache):
    half = cache / "runtimes" / "pyspark-9.8.7"
    (half / "bin").mkdir(parents=True)
    (half / "bin" / "python").write_text("")  # the rename happened, the stamp was never written
    calls: list = []
    rt = runtimes.ensure("9.8.7", install=fake_install(calls))
    assert calls == ["9.8.7"] and (rt.root / ".complete").exists() and rt.python.resolve() != (half / "bin" / "python")


def test_a_runtime_made_for_another_harness_environment_is_pointed_at_this_one(cache):
    rt = runtimes.ensure("9.8.7", install=fake_install([]))
    pth = rt.site_packages / runtimes.PTH_NAME
    pth.write_text(runtimes.pth_line(Path("/elsewhere/site-packages")))
    runtimes.ensure("9.8.7", install=fake_install([]))
    assert pth.read_text() == runtimes.pth_line(runtimes.harness_site_packages())


def test_a_stale_partial_build_is_discarded_unless_a_build_holds_the_lock(cache):
    partial = cache / "runtimes" / "pyspark-9.8.7.partial"
    (partial / "lib").mkdir(parents=True)
    with open(cache / "runtimes" / "pyspark-9.8.7.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert not runtimes.discard_partial("9.8.7") and partial.exists()
    assert runtimes.discard_partial("9.8.7") and not partial.exists()
    assert not runtimes.discard_partial("9.8.7")


def test_the_py4j_requirement_is_read_from_pysparks_metadata(tmp_path):
    (tmp_path / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: pyspark\nVersion: 4.2.1\n"
        "Requires-Dist: py4j (<0.10.9.10,>=0.10.9.7)\n"
        'Requires-Dist: numpy>=1.21; extra == "ml"\n'
        'Requires-Dist: py4j>=0.10.9.7; extra == "connect"\n')
    assert runtimes.py4j_requirement(tmp_path) == "py4j<0.10.9.10,>=0.10.9.7"
    (tmp_path / "METADATA").write_text("Metadata-Version: 2.1\nName: pyspark\nVersion: 4.2.1\n")
    with pytest.raises(RuntimeBuildError, match="no py4j"):
        runtimes.py4j_requirement(tmp_path)


def test_the_previous_version_defaults_to_4_2_1_and_the_environment_can_name_another(monkeypatch):
    assert runtimes.previous_version() == runtimes.DEFAULT_PREVIOUS == "4.2.1"
    monkeypatch.setenv(runtimes.PREVIOUS_ENV, "4.2.0")
    assert runtimes.previous_version() == "4.2.0"
    monkeypatch.setenv(runtimes.PREVIOUS_ENV, "4.2; rm -rf /")
    with pytest.raises(RuntimeBuildError, match=runtimes.PREVIOUS_ENV):
        runtimes.previous_version()


# --------------------------------------------------------------- the local backend's use of a runtime


def test_set_runtime_gives_the_next_driver_start_the_runtimes_interpreter_and_jars(tmp_path, monkeypatch):
    import sys

    import pyspark

    from onceproof.backends.base import PipelineArgs
    from onceproof.backends.common import jars
    from onceproof.backends.local import spark

    asked_jars = []

    def classpath(pyspark_jars=None, spark_version=None):
        asked_jars.append(pyspark_jars)
        return jars.Classpath("spark-sql-kafka", "4.2.0", (tmp_path / "kafka-clients.jar",))

    monkeypatch.setattr(jars, "spark_kafka_classpath", classpath)
    rt = runtimes.Runtime("4.2.1", tmp_path / "rt")
    trains = []

    def ensure(version, train=None):
        assert version == "4.2.1", version
        trains.append(train)
        return rt

    monkeypatch.setattr(runtimes, "ensure", ensure)
    p = PipelineArgs(bootstrap="h:1", sink="eos", checkpoint=tmp_path / "ck", control=tmp_path / "ctl",
                     sink_log=tmp_path / "sink.jsonl", input_topic="in", output_topic="out", progress_topic="prog",
                     sink_id="s", trigger_ms=250, max_offsets=77, txn_timeout_ms=12000, pool_size=6, master="local[2]")
    app = spark.LocalSpark(p, tmp_path / "logs")
    assert app.sup.argv[0] == app.sup.python == sys.executable
    assert app.set_runtime("previous") == "4.2.1"
    assert trains[-1] is not None and trains[-1](rt) == []  # mid-run: no class-data sharing training
    assert app.sup.argv[:3] == [str(rt.python), "-m", "onceproof.job"] and app.sup.python == str(rt.python)
    assert asked_jars[-1] == rt.pyspark_dir / "jars" and rt.pyspark_dir in app.pyspark_dirs
    assert app.set_runtime(None) == pyspark.__version__
    assert app.sup.argv[0] == app.sup.python == sys.executable and asked_jars[-1] == jars.pyspark_jars_dir()


def test_the_supervisor_restarts_a_driver_that_exited_0_on_the_runtime_set_last(tmp_path):
    """A driver stopped on request exits 0 (``onceproof.job.await_query``): it is restarted like a killed
    one, and a restart after :meth:`use_runtime` runs the new command with the new ``PYSPARK_PYTHON``."""
    import sys
    import time

    from onceproof.backends.common.supervisor import DriverSupervisor

    starts = tmp_path / "starts"
    code = ("import os, sys; open(sys.argv[1], 'a').write(os.environ['PYSPARK_PYTHON'] + ' '"
            " + os.environ['ONCEPROOF_DRIVER_INCARNATION'] + '\\n')")
    sup = DriverSupervisor([sys.executable, "-c", code, str(starts)], tmp_path, restart_delay_s=0.05)

    def lines():
        return starts.read_text().splitlines() if starts.exists() else []

    sup.start()
    try:
        deadline = time.monotonic() + 30
        while len(lines()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        sup.use_runtime([sys.executable, "-c", code, str(starts)], "/opt/runtime/bin/python")
        while not any(s.startswith("/opt/runtime/bin/python") for s in lines()) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        sup.stop()
    got = lines()
    assert got[0] == f"{sys.executable} 1" and got[1] == f"{sys.executable} 2", got
    assert any(s.startswith("/opt/runtime/bin/python ") for s in got), got
    assert all(e[3] == 0 for e in sup.events if e[1] == "exit") and sup.restarts() >= 2
