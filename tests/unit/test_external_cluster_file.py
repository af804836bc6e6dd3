"""``backends/external``'s pure parts: ``cluster.toml`` (``cluster_file``), the fault map (``fault_map``) and
what ``--dry-run`` prints (``dry_run``), on synthetic files and the worked example ``examples/cluster.toml``."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path, PurePosixPath

import pytest

from onceproof.backends.external import cluster_file, dry_run
from onceproof.backends.external.cluster_file import ClusterFileError
from onceproof.backends.external.fault_map import FaultMap, FaultMapError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cluster.toml"

MINIMAL = """
[kafka]
bootstrap = "b1:9092"
[kafka.brokers]
1 = { host = "k1", unit = "kafka" }
2 = { host = "k2", unit = "kafka" }
[spark]
bootstrap = "k1:9092"
master = "spark://m:7077"
submit = "spark-submit --master {{master}} app.py {job_args}"
[spark.files]
harness_path = "results"
cluster_path = "/mnt/run"
[vars]
master = "spark://m:7077"
[faults.kill-broker]
run = "ssh {host} sudo systemctl kill -s KILL {unit}"
heal = "ssh {host} sudo systemctl start {unit}"
"""


def _load(tmp_path: Path, text: str, env: dict | None = None):
    p = tmp_path / "cluster.toml"
    p.write_text(text)
    return cluster_file.load(p, env=env or {})


def test_the_worked_example_reads_and_maps_the_compose_faults():
    cf = cluster_file.load(EXAMPLE, env={})
    assert cf.kafka.security.protocol == "PLAINTEXT"
    assert sorted(cf.kafka.brokers) == [1, 2, 3]
    assert cf.spark.cluster_path == PurePosixPath("/var/lib/onceproof")
    specs = cf.faults.specs()
    assert specs == {"kill-broker:*", "pause-broker:*", "kill-driver", "kill-driver-in-commit-window"}
    assert not any(s.startswith(("partition", "kill-executor", "bounce-broker")) for s in specs)
    assert cf.topic_names("0123456789abcdef").input == "onceproof-01234567-input"


def test_relative_paths_and_broker_fields_reach_the_templates(tmp_path):
    cf = _load(tmp_path, MINIMAL)
    assert cf.spark.harness_path == tmp_path / "results"
    values = cf.faults.values("kill-broker", {"broker_id": 2, "host": "k2", "port": 9092}, broker=cf.kafka.brokers[2])
    argv = cf.faults.run("kill-broker", values).argv
    assert argv == ("ssh", "k2", "sudo", "systemctl", "kill", "-s", "KILL", "kafka")
    assert cf.faults.heal("kill-broker", values).argv[-1] == "kafka"


def test_a_value_is_always_one_argument_and_job_args_stay_separate(tmp_path):
    cf = _load(tmp_path, MINIMAL.replace('unit = "kafka" }\n2', 'unit = "kafka; rm -rf /" }\n2'))
    values = cf.faults.values("kill-broker", {"broker_id": 1, "host": "k1", "port": 9092}, broker=cf.kafka.brokers[1])
    argv = cf.faults.run("kill-broker", values).argv
    assert argv[-1] == "kafka; rm -rf /" and len(argv) == 8
    cmd = cf.spark.submit_command({"master": "spark://m:7077"}, ["--sink", "eos", "--checkpoint", "/mnt/run/a b"])
    assert cmd.argv == ("spark-submit", "--master", "{master}", "app.py", "--sink", "eos", "--checkpoint",
                        "/mnt/run/a b")
    assert cmd.display().startswith("[local] $ spark-submit")


def test_shell_entries_run_through_sh_c(tmp_path):
    text = MINIMAL.replace('heal = "ssh {host} sudo systemctl start {unit}"',
                           'heal = "ssh {host} sudo systemctl start {unit} && sleep 1"\nshell = true')
    cf = _load(tmp_path, text)
    heal = cf.faults.heal("kill-broker", {"broker_id": 1, "host": "k1", "port": 1, "unit": "kafka", "run_id": "r",
                                          "prefix": "p"})
    assert heal.argv == ("sh", "-c", "ssh k1 sudo systemctl start kafka && sleep 1")


def test_the_run_dir_maps_to_the_cluster_side_only_below_harness_path(tmp_path):
    cf = _load(tmp_path, MINIMAL)
    assert cf.spark.cluster_side(tmp_path / "results" / "r1" / "control") == PurePosixPath("/mnt/run/r1/control")
    with pytest.raises(ClusterFileError, match="harness_path"):
        cf.spark.cluster_side(tmp_path / "elsewhere")


@pytest.mark.parametrize("edit, match", [
    (('topic_prefix = "onceproof-"', ''), None),
    (('[kafka]\n', '[kafka]\ntopic_prefix = ""\n'), "topic_prefix: may not be empty"),
    (('[kafka]\n', '[kafka]\ntopic_prefix = "_x"\n'), "may not start with '_'"),
    (('[kafka]\n', '[kafka]\npassword = "hunter2"\n'), 'password_env = "ONCEPROOF_KAFKA_PASSWORD"'),
    (('[vars]\n', '[vars]\napi_token = "abc"\n'), "vars.api_token: a secret is not written"),
    (('[kafka.brokers]\n', '[kafka.security]\nprotocol = "SASL_SSL"\nmechanism = "PLAIN"\nusername = "u"\n'
                           'password_env = "NOPE"\n[kafka.brokers]\n'), "NOPE is not set"),
    (('app.py {job_args}', 'app.py'), "must pass {job_args}"),
    (('app.py {job_args}', 'app.py {job_args} {nope}'), r"spark.submit: unknown placeholder \{nope\}"),
    (('cluster_path = "/mnt/run"', 'cluster_path = "mnt"'), "cluster_path: an absolute path"),
    (('[faults.kill-broker]', '[faults.partition]'), "no such fault for the external backend"),
    (('KILL {unit}"', 'KILL {unitt}"'), r"faults.kill-broker.run: unknown placeholder \{unitt\}"),
    (('KILL {unit}"', 'KILL {unit!r}"'), "only plain {name} placeholders"),
    (('KILL {unit}"', 'KILL {unit"'), "not a template"),
    (('heal = "ssh', 'where = "ftp:x"\nheal = "ssh'), 'where: "local" or "ssh:user@host"'),
    (('heal = "ssh', 'timeout_s = 0\nheal = "ssh'), "timeout_s: seconds between 0 and 3600"),
    (('heal = "ssh', 'retries = 2\nheal = "ssh'), "kill-broker.retries: unknown field"),
    (('[faults.kill-broker]', '[faults.pause-broker]'), None),
    (('1 = { host = "k1"', 'one = { host = "k1"'), "kafka.brokers.one: a broker's node.id"),
    (('[vars]\n', '[vars]\nflag = true\n'), "vars: expected strings or numbers"),
    (('[spark.files]\n', '[spark.files]\nmode = "relay"\n'), "spark.files.mode: one of mounted"),
    (('[kafka]\n', '[kafka]\n[zookeeper]\n'), "zookeeper: unknown table"),
])
def test_each_broken_rule_names_its_key(tmp_path, edit, match):
    old, new = edit
    text = MINIMAL.replace(old, new, 1)
    if match is None:
        cf = _load(tmp_path, text)
        assert cf.kafka.topic_prefix == "onceproof-"
        return
    with pytest.raises(ClusterFileError, match=match) as e:
        _load(tmp_path, text)
    assert str(e.value).startswith(str(tmp_path / "cluster.toml") + ": ")


def test_a_pause_needs_a_heal():
    with pytest.raises(FaultMapError, match="pause-driver.heal: required"):
        FaultMap.parse({"pause-driver": {"run": "docker pause d{incarnation}"}})


def test_a_missing_file_names_the_flag(tmp_path):
    with pytest.raises(ClusterFileError, match="give --cluster a cluster.toml"):
        cluster_file.load(tmp_path / "nope.toml")
    (tmp_path / "bad.toml").write_text("[kafka\n")
    with pytest.raises(ClusterFileError, match="not TOML"):
        cluster_file.load(tmp_path / "bad.toml")


def test_sasl_security_is_read_from_the_environment_and_never_printed(tmp_path):
    text = MINIMAL.replace("[kafka.brokers]\n", '[kafka.security]\nprotocol = "SASL_PLAINTEXT"\n'
                           'mechanism = "SCRAM-SHA-512"\nusername = "op"\npassword_env = "OP_PW"\n[kafka.brokers]\n')
    cf = _load(tmp_path, text, env={"OP_PW": "s3cret-value"})
    assert cf.kafka.security.to_librdkafka()["sasl.password"] == "s3cret-value"
    printed = "\n".join(dry_run.describe(cf, ["kill-broker:leader"], "r" * 12)) + repr(cf)
    assert "s3cret-value" not in printed and "SASL_PLAINTEXT" in printed


def test_dry_run_renders_every_broker_and_both_steps_of_the_commit_window():
    cf = cluster_file.load(EXAMPLE, env={})
    lines = dry_run.describe(cf, ["kill-broker:leader", "kill-driver-in-commit-window"], "abcdef1234")
    runs = [ln for ln in lines if ln.startswith("run:")]
    assert [shlex.split(ln.partition("$ ")[2])[-1] for ln in runs[:3]] == ["kafka1", "kafka2", "kafka3"]
    assert "docker pause" in runs[3] and "docker rm -f" in runs[4]
    assert lines[1] == ("create topics: onceproof-abcdef12-input, onceproof-abcdef12-output, "
                        "onceproof-abcdef12-output-progress")
    assert lines[-1].startswith("delete topics: onceproof-abcdef12-input")
    with pytest.raises(FaultMapError, match=r"add \[faults.kill-executor\]"):
        dry_run.describe(cf, ["kill-executor"], "abcdef1234")


def test_the_cluster_runs_the_job_on_its_side_of_the_files_with_its_own_kafka_and_master(tmp_path):
    from onceproof.backends.base import PipelineArgs
    from onceproof.backends.external.spark import job_args
    cf = _load(tmp_path, MINIMAL.replace('submit = "', 'jars_dir = "/opt/jars/"\nsubmit = "'))
    run = tmp_path / "results" / "r1"
    p = PipelineArgs(bootstrap="localhost:29091", sink="eos", checkpoint=run / "checkpoint", control=run / "control",
                     sink_log=run / "sink.jsonl", input_topic="onceproof-r1-input", output_topic="onceproof-r1-output",
                     progress_topic="onceproof-r1-output-progress", sink_id="s", trigger_ms=500, max_offsets=1000,
                     txn_timeout_ms=30000, pool_size=16, master="local-cluster[2,1,1024]")
    args = job_args(cf, p, connector=["a.jar", "b.jar"])
    at = {k: args[args.index(k) + 1] for k in ("--bootstrap", "--master", "--checkpoint", "--control-dir",
                                                "--sink-log", "--jars", "--input-topic")}
    assert at == {"--bootstrap": "k1:9092", "--master": "spark://m:7077", "--checkpoint": "/mnt/run/r1/checkpoint",
                  "--control-dir": "/mnt/run/r1/control", "--sink-log": "/mnt/run/r1/sink.jsonl",
                  "--jars": "local:/opt/jars/a.jar,local:/opt/jars/b.jar", "--input-topic": "onceproof-r1-input"}
    outside = dataclasses.replace(p, checkpoint=tmp_path / "elsewhere" / "checkpoint")
    with pytest.raises(ClusterFileError, match="harness_path"):
        job_args(cf, outside, connector=[])


def test_the_external_backend_offers_only_what_the_map_holds():
    from onceproof.backends.external.backend import ExternalBackend
    caps = ExternalBackend(cluster_file.load(EXAMPLE, env={})).capabilities
    assert caps == {"kill-broker:*", "pause-broker:*", "kill-driver", "kill-driver-in-commit-window"}
    assert not {s for s in caps if s.startswith(("partition", "slow-network", "bounce-broker", "kill-executor",
                                                 "commit-delay", "elect-leaders"))}
