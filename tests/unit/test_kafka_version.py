"""The broker's Kafka release (backends/common/jars.py): ``--kafka-version`` over ``ONCEPROOF_KAFKA_VERSION`` over the
pin, checked for form and the supported range before Maven is asked for it; the options that choose it
(``run``, ``cluster up``, the pytest plugin's cluster keys) and where it is recorded (``test.json``'s versions,
a suite's certificate). No Maven run here: a release that Maven does not serve is a stand-in ``ResolveError``."""

from __future__ import annotations

import pytest

from onceproof.backends.common import jars
from onceproof.harness import suite
from onceproof.harness.config import ConfigError, TestConfig
from onceproof.harness.runner import versions
from onceproof.pytest_plugin import plugin
from tests.conftest import run_cli
from tests.stand_in_backend import StandInBackend


def test_the_pin_unless_the_variable_names_another_version(monkeypatch):
    monkeypatch.delenv(jars.KAFKA_VERSION_ENV, raising=False)
    pinned = jars.kafka_version()
    assert pinned == jars.pinned_kafka_version()
    assert pinned.count(".") == 2 and pinned.split(".")[0].isdigit()
    monkeypatch.setenv(jars.KAFKA_VERSION_ENV, " 3.5.2 ")
    assert jars.kafka_version() == "3.5.2"
    assert jars.kafka_version("3.9.1") == "3.9.1"  # the option wins over the variable
    monkeypatch.setenv(jars.KAFKA_VERSION_ENV, "")
    assert jars.kafka_version() == pinned


@pytest.mark.parametrize("bad", ["latest", "3.x", "3.5.2; rm -rf /", "-Dfoo=1"])
def test_a_value_that_is_not_a_version_names_the_fix(monkeypatch, bad):
    monkeypatch.setenv(jars.KAFKA_VERSION_ENV, bad)
    with pytest.raises(jars.ResolveError, match="unset it to use the pinned one"):
        jars.kafka_version()
    with pytest.raises(jars.ResolveError, match="--kafka-version"):
        jars.kafka_version(bad)


@pytest.mark.parametrize("version,why", [("3.5.0", None), ("3.9.1", None), ("4.4.0", None), ("4.99.3", None),
                                         ("3.4.1", "outside the supported range, 3.5.0 to 4.x"),
                                         ("2.8.2", "outside"), ("5.0.0", "outside"),
                                         ("3.9", "not an Apache Kafka release"), ("v4.1.1", "not an Apache")])
def test_the_supported_range(version, why):
    got = jars.kafka_version_problem(version)
    assert (got is None) if why is None else (why in got), got


def test_the_tools_stay_on_the_pin_whatever_the_brokers_run(monkeypatch):
    """``reassign-partitions`` needs kafka-tools ≥ 3.7 (its ReassignPartitionsCommand), whichever broker runs."""
    monkeypatch.setenv(jars.KAFKA_VERSION_ENV, "3.5.2")
    monkeypatch.delenv("KAFKA_HOME", raising=False)
    asked = []
    monkeypatch.setattr(jars, "_resolve", lambda name, version, pom, props: asked.append((name, version)))
    jars.kafka_tools_classpath()
    jars.kafka_classpath()
    assert asked == [("kafka-tools", jars.pinned_kafka_version()), ("kafka", "3.5.2")]


def test_run_refuses_an_unsupported_release_or_backend_before_anything_starts(monkeypatch):
    with pytest.raises(ConfigError, match=r"--kafka-version.*3\.5\.0 to 4\.x"):
        TestConfig(kafka_version="3.4.0").validate()
    monkeypatch.setattr(StandInBackend, "name", "stand-in")
    monkeypatch.setattr(TestConfig, "backend_instance", lambda self: StandInBackend())
    with pytest.raises(ConfigError, match="drop --kafka-version, or use --backend local"):
        TestConfig(kafka_version="3.9.1").validate()


def test_a_release_maven_does_not_serve_is_a_usage_error(monkeypatch):
    def refuse(version=""):
        raise jars.ResolveError(f"Maven could not resolve kafka {version} (exit 1).\nCommand: mvn ...")
    monkeypatch.setattr(jars, "kafka_classpath", refuse)
    with pytest.raises(ConfigError, match=r"Kafka 3\.5\.99 could not be resolved .*exit 1.*from 3\.5\.0 to 4\.x"):
        TestConfig(kafka_version="3.5.99").validate()


def test_the_chosen_release_is_the_one_recorded():
    backend = StandInBackend()
    assert versions(backend, "3.9.1")["kafka"] == "3.9.1"
    assert versions(backend)["kafka"] == backend.versions().get("kafka", versions(backend)["kafka"])
    assert suite.option_value(["--rate", "10", "--kafka-version", "3.9.1"], "--kafka-version") == "3.9.1"
    assert suite.option_value(["--kafka-version=4.4.0"], "--kafka-version") == "4.4.0"
    assert suite.option_value(["--rate", "10"], "--kafka-version") == ""


def test_the_plugins_cluster_is_shaped_by_the_release():
    assert "kafka_version" in plugin.CLUSTER_KEYS


def test_test_all_refuses_a_release_outside_the_range_before_any_cell():
    p = run_cli(["test-all", "--sink", "eos", "--nemesis-package", "commit", "--dry-run", "--kafka-version", "2.8.2"],
                timeout=120)
    assert p.returncode == 254 and "3.5.0 to 4.x" in p.stderr, p.stderr
    p = run_cli(["test-all", "--sink", "eos", "--nemesis-package", "commit", "--dry-run", "--kafka-version=3.9.1"],
                timeout=120)
    assert p.returncode == 0 and "--kafka-version=3.9.1" in p.stdout, p.stdout[-2000:]


def test_rolling_upgrade_and_its_release_go_together_forward_only(monkeypatch):
    """``--kafka-upgrade-to``: only with ``rolling-upgrade`` (and the fault only with it), 3.6.0 or newer, never
    older than the brokers' own release, on a backend that picks releases; resolved like ``--kafka-version``."""
    asked = []
    monkeypatch.setattr(jars, "kafka_classpath", lambda version="": asked.append(("kafka", version)))
    monkeypatch.setattr(jars, "kafka_tools_classpath", lambda version="": asked.append(("kafka-tools", version)))
    with pytest.raises(ConfigError, match="rolling-upgrade needs the release to move to: add --kafka-upgrade-to"):
        TestConfig(nemesis=["rolling-upgrade"]).validate()
    with pytest.raises(ConfigError, match="add it to --nemesis, or drop --kafka-upgrade-to"):
        TestConfig(kafka_upgrade_to="4.4.0").validate()
    with pytest.raises(ConfigError, match="3.6.0 or newer, not 3.5.2"):
        TestConfig(nemesis=["rolling-upgrade"], kafka_upgrade_to="3.5.2").validate()
    monkeypatch.setenv(jars.KAFKA_VERSION_ENV, "4.4.0")
    with pytest.raises(ConfigError, match="4.1.1 is older than the brokers' 4.4.0: Kafka supports no downgrade"):
        TestConfig(nemesis=["rolling-upgrade"], kafka_upgrade_to="4.1.1").validate()
    assert asked == []  # refused before Maven is asked
    cfg = TestConfig(nemesis=["rolling-upgrade"], kafka_version="3.9.1", kafka_upgrade_to="4.4.0").validate()
    assert ("kafka", "4.4.0") in asked and ("kafka-tools", "4.4.0") in asked
    assert "--kafka-version 3.9.1 --kafka-upgrade-to 4.4.0" in cfg.replay_command()
    assert versions(StandInBackend(), "3.9.1", "4.4.0")["kafka-upgrade-to"] == "4.4.0"
    monkeypatch.setattr(StandInBackend, "name", "stand-in")
    monkeypatch.setattr(TestConfig, "backend_instance", lambda self: StandInBackend())
    with pytest.raises(ConfigError, match="drop --kafka-upgrade-to, or use --backend local"):
        TestConfig(nemesis=["rolling-upgrade"], kafka_upgrade_to="4.4.0").validate()


def test_the_tools_of_a_named_release_are_that_releases():
    """``rolling-upgrade`` finalizes with the new release's ``kafka-features``, which knows its levels."""
    import onceproof.backends.common.jars as j
    got = []
    orig = j._resolve
    try:
        j._resolve = lambda name, version, pom, props: got.append((name, version, props["kafka.version"]))
        j.kafka_tools_classpath("4.4.0")
    finally:
        j._resolve = orig
    assert got == [("kafka-tools", "4.4.0", "4.4.0")]
    assert jars.version_tuple("4.10.2") > jars.version_tuple("4.9.9") > jars.version_tuple("3.9.1")


def test_a_cluster_of_another_release_trains_its_broker_archives_first_and_starts_without_on_failure(
        monkeypatch, tmp_path, caplog):
    from onceproof.backends.base import ClusterShape
    from onceproof.backends.local import backend as local

    asked: list[str] = []

    def train(version):
        asked.append(version)
        if version == "3.5.2":
            raise RuntimeError("Maven Central did not answer")
        return ["kafka: class-data sharing archive /cache/kafka-1.jsa (50 MB)"]

    monkeypatch.setattr(local, "train_archives", train)
    monkeypatch.setattr(local, "free_base_port", lambda nodes, proxied=False: 29000)
    be = local.LocalBackend()
    with caplog.at_level("INFO", logger="onceproof.backends.local"):
        c = be.cluster(ClusterShape(data_dir=tmp_path / "a", kafka_version="4.4.0"))
        assert c.spec.base_port == 29000 and asked == ["4.4.0"]
        be.cluster(ClusterShape(data_dir=tmp_path / "b", kafka_version="3.5.2"))  # no archive: still a cluster
        be.cluster(ClusterShape(data_dir=tmp_path / "c"))  # the pin's: onceproof deps made them
    assert asked == ["4.4.0", "3.5.2"]
    assert "kafka-1.jsa" in caplog.text and "Maven Central did not answer" in caplog.text
