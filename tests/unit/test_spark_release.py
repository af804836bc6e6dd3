"""``--spark-version`` (backends/common/spark_release.py): a line picks its newest patch whose Kafka connector
Maven serves at the same version, a release is taken as given once the index serves it, and what cannot run
is refused before anything starts (run, test-all's Spark axis). PyPI's listing and Maven's answers are
stand-ins here (synthetic: no network); tests/unit/test_pipeline_python.py asks the real Maven."""

from __future__ import annotations

from pathlib import Path

import pytest

from onceproof.backends.common import spark_release
from onceproof.backends.common.spark_release import SparkReleaseError, resolve
from onceproof.harness import suite
from onceproof.harness.config import ConfigError, TestConfig
from tests.conftest import run_cli
from tests.stand_in_backend import NoNetworkStandIn

INDEX = ["4.3.0", "4.2.1", "4.2.0", "4.1.4", "4.1.3", "3.5.9", "3.5.8", "3.5.7", "3.5.1"]
"""PyPI's releases, newest first."""
MAVEN = {"4.1.4": "4.1.3", "4.1.3": "4.1.3", "3.5.9": "3.5.7", "3.5.8": "3.5.7", "3.5.7": "3.5.7",
         "4.3.0": "4.2.0", "4.2.1": "4.2.0", "4.2.0": "4.2.0", "3.5.1": "3.5.1"}
"""The connector each PySpark runs with (stepped down to what Maven serves, or the pinned one)."""


@pytest.mark.parametrize("wanted,got", [("3.5", "3.5.7"), ("3.5.x", "3.5.7"), ("4.1", "4.1.3"), ("4.2", "4.2.0"),
                                        ("4.3", "4.3.0"), ("3.5.9", "3.5.9"), ("3.5.1", "3.5.1")])
def test_a_line_picks_its_newest_patch_with_a_connector_of_the_same_version(wanted, got):
    assert resolve(wanted, lambda: INDEX, MAVEN.__getitem__) == got


@pytest.mark.parametrize("wanted,why", [("3.4", "outside the supported range, 3.5 to 4.x"), ("5.0", "outside"),
                                        ("latest", "not a Spark release or line"), ("3.5.2", "serves no pyspark 3.5.2"),
                                        ("4.0", "serves no pyspark 4.0.x"), ("3.5.7; rm -rf /", "not a Spark")])
def test_what_cannot_be_chosen_names_the_fix(wanted, why):
    with pytest.raises(SparkReleaseError, match=why.replace(".", r"\.")):
        resolve(wanted, lambda: INDEX, MAVEN.__getitem__)


def test_a_line_maven_has_no_connector_for_is_refused():
    from onceproof.backends.common import jars

    def none(v):
        raise jars.ResolveError(f"Maven serves no spark-sql-kafka on the 3.5 line up to {v}")
    with pytest.raises(SparkReleaseError, match="no Kafka connector for Spark 3.5: Maven serves no"):
        resolve("3.5", lambda: INDEX, none)


def test_the_index_listing_is_pips(monkeypatch):
    """The harness's pip lists the releases (a user's index settings apply); pre-releases are left out."""
    import subprocess

    class Done:
        returncode, stderr = 0, ""
        stdout = "pyspark (4.3.0)\nAvailable versions: 4.3.0, 4.2.0.dev1, 3.5.10, 3.5.9\n  INSTALLED: 4.3.0\n"
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: Done())
    assert spark_release.pypi_releases() == ["4.3.0", "3.5.10", "3.5.9"]
    Done.returncode, Done.stdout, Done.stderr = 1, "", "ERROR: No matching distribution found for pyspark"
    with pytest.raises(SparkReleaseError, match="No matching distribution.*PIP_INDEX_URL"):
        spark_release.pypi_releases()


def test_run_refuses_what_cannot_run_before_anything_starts(monkeypatch):
    with pytest.raises(ConfigError, match=r"--spark-version.*3\.5 to 4\.x"):
        TestConfig(spark_version="3.4").validate()
    monkeypatch.setattr(spark_release, "release", lambda w: {"3.5": "3.5.7", "4.2": "4.2.0"}[w])
    with pytest.raises(ConfigError, match=r"runs on PySpark 4\.2\.0 .*not 3\.5\.7: drop --spark-version"):
        TestConfig(sink="delta", spark_version="3.5").validate()
    TestConfig(sink="delta", spark_version="4.2").validate()  # its own release: nothing to refuse
    TestConfig(spark_version="3.5").validate()
    with pytest.raises(ConfigError, match="--pipeline-python names your job's interpreter"):
        TestConfig(spark_version="3.5", pipeline_cmd="python job.py", pipeline_python="/usr/bin/python3")\
            ._check_spark_version(TestConfig().backend_instance())
    monkeypatch.setattr(TestConfig, "backend_instance", lambda self: NoNetworkStandIn())
    with pytest.raises(ConfigError, match="the no-network backend runs one PySpark only; drop --spark-version"):
        TestConfig(spark_version="3.5").validate()


def test_the_spark_axis_adds_cells_per_version_pair():
    cells = suite.plan_cells(sinks_=["eos"], workloads=["keyed"], package_names=["commit"], test_count=1,
                             time_limit=30)
    axis = suite.across_versions(cells, ["3.9.1", "4.4.0"], ["3.5", "4.3.0"])
    assert [(c.kafka_version, c.spark_version) for c in axis] == [("3.9.1", "3.5"), ("3.9.1", "4.3.0"),
                                                                 ("4.4.0", "3.5"), ("4.4.0", "4.3.0")]
    assert axis[0].name == "eos-commit-kafka3.9.1-spark3.5"
    only_spark = suite.across_versions(cells, [], ["3.5"])
    assert [(c.kafka_version, c.spark_version) for c in only_spark] == [("", "3.5")]
    argv = suite.run_command(only_spark[0], Path("/r"), [])
    assert argv[argv.index("--spark-version") + 1] == "3.5" and "--kafka-version" not in argv
    assert suite.header_versions({"pyspark": "4.3.0"}, axis)["pyspark"].startswith("3.5, 4.3.0 (")


def test_test_all_refuses_the_spark_axis_before_any_cell():
    for args, why in ((["--spark-versions", "3.5,3.4"], "3.4 is outside the supported range"),
                      (["--spark-versions", "3.5", "--spark-version", "4.1"], "drop --spark-version"),
                      (["--spark-versions", "3.5", "--backend", "docker"], "use --backend local"),
                      (["--spark-versions", "3.5", "--sink", "eos,delta"], "delta (PySpark 4.2.0)")):
        p = run_cli(["test-all", "--nemesis-package", "commit", "--dry-run", *args], timeout=120)
        assert p.returncode == 254 and why in p.stderr, (args, p.stderr)
    p = run_cli(["test-all", "--sink", "eos", "--nemesis-package", "commit", "--dry-run", "--spark-versions",
                 "3.5, 4.1,3.5"], timeout=120)
    assert p.returncode == 0, p.stderr
    assert [ln.split()[0] for ln in p.stdout.splitlines() if ln.startswith("eos-")] == \
        ["eos-commit-spark3.5", "eos-commit-spark4.1"]


def test_the_next_line_is_the_next_one_the_index_serves():
    assert spark_release.next_line("3.5.7", INDEX) == "4.1"  # this index skips 4.0
    assert spark_release.next_line("3.5.7", INDEX + ["4.0.4"]) == "4.0"
    assert spark_release.next_line("4.2.0", INDEX) == "4.3"
    assert spark_release.next_line("4.3.0", INDEX) is None
