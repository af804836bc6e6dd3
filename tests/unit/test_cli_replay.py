"""The replay command carries every `run` option that differs from its default: for each option the
CLI's `run` exposes, a config with a non-default value gives a replay command that the CLI's own parser
turns back into the same config. A forgotten option fails here."""

from __future__ import annotations

import shlex
import sys
from dataclasses import fields, replace
from pathlib import Path

import pytest
import typer

from onceproof.backends import registry
from onceproof.harness import cli
from onceproof.harness.config import ConfigError, TestConfig
from onceproof.nemesis import catalog
from tests.conftest import run_cli


@pytest.fixture(autouse=True)
def second_backend(monkeypatch):
    """A second backend to choose (only ``local`` is real): the stand-in of ``tests/stand_in_backend.py``."""
    monkeypatch.setitem(registry.BACKENDS, "stand-in", "tests.stand_in_backend:StandInBackend")
    monkeypatch.setattr(registry, "_made", {})


@pytest.fixture(autouse=True)
def no_package_index(monkeypatch):
    """``--spark-version``'s release without PyPI or Maven (tests/unit/test_spark_release.py covers the choice)."""
    from onceproof.backends.common import spark_release

    monkeypatch.setattr(spark_release, "release", lambda wanted: "3.5.7")


def run_options() -> dict[str, str]:
    """``{field name: first option name}`` of the real `run` command, --verbose, --dry-run and --help aside."""
    cmd = typer.main.get_command(cli.app).commands["run"]
    return {p.name: p.opts[0] for p in cmd.params if p.name not in ("verbose", "dry_run", "help")}


def non_default(f) -> object:
    """A valid value of field ``f`` other than its default."""
    if f.metadata.get("example") is not None:
        return f.metadata["example"]
    d = TestConfig.default_of(f)
    if f.metadata.get("choices") is not None:
        return next(c for c in f.metadata["choices"]() if c != d)
    if isinstance(d, bool):
        return not d
    if isinstance(d, int):
        hi = f.metadata.get("hi")
        return d - 1 if hi is not None and d + 3 > hi else d + 3
    if isinstance(d, float):
        return d + 1.25
    if isinstance(d, Path):
        return Path("/tmp/elsewhere/results")
    raise AssertionError(f"field {f.name} ({type(d).__name__}) needs an 'example' in its metadata")


def parse_back(cfg: TestConfig) -> TestConfig:
    argv = shlex.split(cfg.replay_command())
    assert argv[:2] == ["onceproof", "run"], argv
    return cli.parse_run_args(argv[2:])


def test_every_field_is_a_run_option_and_every_option_a_field():
    assert set(run_options()) == {f.name for f in fields(TestConfig)}


COMPANIONS = {  # options that only go with another's non-default value
    "file_read": {"sink": "file"},
    "output": {"pipeline_cmd": "{python} job.py --dsn {postgres_dsn} --table {output_table}"},
    # an interpreter that exists and has PySpark (the option's example names a user's venv)
    "pipeline_python": {"pipeline_cmd": "{python} job.py --bootstrap {bootstrap}", "pipeline_python": sys.executable},
}
COMPANIONS["order_column"] = {"output": "postgres", **COMPANIONS["output"]}  # a table output's column
NEEDS_PIPELINE_CMD = ("output", "pipeline_python", "order_column")
COMPANIONS |= {"nodes": {"backend": "ssh"}, "cluster_file": {"backend": "external"}}
COMPANIONS["kafka_upgrade_to"] = {"nemesis": ["rolling-upgrade"]}  # its fault; the pin to the pin
NEEDS_BACKEND = ("nodes", "cluster_file")  # each goes with its own backend only


NOT_REPLAYED = sorted(f.name for f in fields(TestConfig) if not f.metadata.get("replayed", True))


@pytest.mark.parametrize("name", sorted(set(run_options()) - set(NOT_REPLAYED)))
def test_each_option_survives_the_replay_command(name):
    f = next(f for f in fields(TestConfig) if f.name == name)
    cfg = replace(TestConfig(), **{name: non_default(f), **COMPANIONS.get(name, {})}).validate()
    assert getattr(cfg, name) != TestConfig.default_of(f)
    replay = cfg.replay_command()
    assert run_options()[name] in shlex.split(replay) or any(w.startswith("--no-") for w in shlex.split(replay))
    assert parse_back(cfg) == cfg, replay


def test_where_a_run_ran_is_not_replayed(tmp_path):
    assert NOT_REPLAYED == ["warm_cluster"]
    (tmp_path / "cluster.json").write_text("{}")
    cfg = replace(TestConfig(), warm_cluster=str(tmp_path)).validate()
    assert "--warm-cluster" not in shlex.split(cfg.replay_command())
    assert parse_back(cfg) == replace(cfg, warm_cluster="")


def test_a_warm_cluster_directory_without_a_cluster_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="onceproof cluster up --dir"):
        replace(TestConfig(), warm_cluster=str(tmp_path)).validate()


def test_all_options_at_once_survive():
    # --pipeline-cmd excludes --sink, --workload and the docker backend, and --output needs it; --file-read
    # needs --sink file, which excludes --workload counter and the docker backend: each round-trips with
    # every other option
    every = {f.name: non_default(f) for f in fields(TestConfig)} | {"pipeline_python": sys.executable}
    # --kafka-version needs a backend that picks the brokers' release (local): in the two rounds without
    # --backend; --kafka-upgrade-to needs its fault: alone (test_each_option_survives_the_replay_command);
    # --spark-version needs a backend with a second runtime and no --pipeline-python: the second round only
    every.pop("kafka_upgrade_to")
    cfg = TestConfig(**{k: v for k, v in every.items()
                        if k not in ("pipeline_cmd", "file_read", "kafka_version", "spark_version",
                                     *NEEDS_PIPELINE_CMD, *NEEDS_BACKEND)}).validate()
    assert parse_back(cfg) == cfg
    cfg = TestConfig(**{**{k: v for k, v in every.items()
                           if k not in ("pipeline_cmd", "workload", "backend", *NEEDS_PIPELINE_CMD, *NEEDS_BACKEND)},
                        "sink": "file"}).validate()
    assert cfg.file_read == "listing" and parse_back(cfg) == cfg
    cfg = TestConfig(**{k: v for k, v in every.items()
                        if k not in ("sink", "backend", "workload", "file_read", "spark_version",
                                     *NEEDS_BACKEND)}).validate()
    assert cfg.pipeline_cmd and cfg.output == "postgres" and cfg.pipeline_python and parse_back(cfg) == cfg


def test_default_config_replays_to_itself_and_names_what_a_run_is():
    replay = TestConfig().replay_command()
    for flag in ("--sink", "--nemesis", "--seed", "--time-limit"):
        assert flag in replay
    assert "--trigger-ms" not in replay  # at its default: left out
    assert parse_back(TestConfig()) == TestConfig()


def test_floats_round_trip_exactly_and_fault_order_is_kept():
    cfg = TestConfig(time_limit=0.1 + 0.2, fault_hold=123.456789, nemesis_interval=7.0)
    assert parse_back(cfg) == cfg
    every = catalog.all_specs()
    assert "--nemesis all" in TestConfig(nemesis=every).replay_command()
    backwards = TestConfig(nemesis=every[::-1])
    assert "all" not in shlex.split(backwards.replay_command())
    assert parse_back(backwards).nemesis == every[::-1]


def test_boolean_true_by_default_would_replay_as_no_flag():
    cfg = TestConfig(proxy=True, keep_data=True)
    words = shlex.split(cfg.replay_command())
    assert "--proxy" in words and "--keep-data" in words
    assert parse_back(cfg) == cfg
    assert cli.parse_run_args(["--proxy", "--no-proxy"]).proxy is False


def test_replay_command_is_accepted_by_the_real_cli_as_far_as_validation():
    """The CLI subprocess parses and validates a replay command (a bad value then shows it was read)."""
    cfg = TestConfig(trigger_ms=250, max_offsets=77, recovery_timeout=33.5, proxy=True)
    argv = shlex.split(cfg.replay_command())[1:] + ["--rate", "nan"]  # stop it before anything starts
    p = run_cli(argv, timeout=60)
    assert p.returncode == 254 and "--rate" in p.stderr, p.stderr


def test_a_pipeline_cmd_run_replays_without_the_bundled_sink():
    """No bundled sink runs under --pipeline-cmd, so its replay line names none (issue 41): it said
    `--sink eos`. The command still parses back to the same config, and a bundled run still names its sink."""
    cfg = TestConfig(pipeline_cmd="{python} job.py --bootstrap {bootstrap} --output-topic {output_topic}").validate()
    words = shlex.split(cfg.replay_command())
    assert "--sink" not in words and "--pipeline-cmd" in words
    assert parse_back(cfg) == cfg
    assert "--sink" in shlex.split(TestConfig().replay_command())
