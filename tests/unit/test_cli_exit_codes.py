"""Exit codes follow Jepsen's (0 valid, 1 invalid, 2 unknown, 254 usage error, 255 crashed), through the
real CLI as a subprocess: every usage error is one line on stderr and exit 254 with nothing created; a
crash is one line naming the cause and the file that keeps the traceback, and exit 255.
No cluster is started (a run that needs one crashes first on a missing `java`)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path

import pytest
import typer

from onceproof.harness import cli
from onceproof.harness.config import ConfigError, TestConfig
from tests.conftest import REPO, run_cli


def one_line_error(p: subprocess.CompletedProcess) -> str:
    """The single stderr line of a failed command; fails the test if there is a traceback or more lines."""
    err = p.stderr.strip()
    assert "Traceback" not in p.stdout + p.stderr, p.stdout + p.stderr
    assert err and "\n" not in err, f"want one line on stderr, got:\n{p.stderr}"
    return err


# ----------------------------------------------------------------------------------------- usage: 254

USAGE = [
    (["run", "--bogus"], "--bogus"),
    (["run", "--keys", "abc"], "--keys"),
    (["run", "--sink", "nope"], "--sink"),
    (["run", "--nemesis", "bogus"], "--nemesis"),
    (["check"], "RUN_DIR"),
    (["check", "somewhere", "--bootstrap", "127.0.0.1:1"], "not both"),
    (["check", "--bootstrap", "127.0.0.1:1", "--settle", "nan"], "--settle"),
    (["check", "--bootstrap", "127.0.0.1:1", "--settle", "90", "--recovery-timeout", "60"], "--settle"),
    (["check", "--bootstrap", "127.0.0.1:1", "--recovery-timeout", "-1"], "--recovery-timeout"),
    (["check", "--bootstrap", "127.0.0.1:1", "--file-sink", "/nonexistent/out"], "--file-sink"),
    (["check", "--bootstrap", "127.0.0.1:1", "--workload", "nope"], "--workload"),
    (["check", "--bootstrap", "127.0.0.1:1", "--file-read", "glob"], "--file-read"),
    (["check", "somewhere", "--workload", "counter"], "--workload"),
    (["run", "--workload", "nope"], "--workload"),
    (["run", "--pipeline-cmd", "{python} x.py {nope}"], "--pipeline-cmd"),
    (["run", "--sink", "file", "--workload", "counter"], "--workload"),
    (["run", "--file-read", "listing"], "--file-read"),
    (["report"], "run_dir"),
    (["no-such-command"], "no-such-command"),
    (["cluster", "up", "--brokers", "0"], "--brokers"),
    (["prune"], "--keep-last"),
    (["prune", "--keep-last", "0"], "--keep-last"),
    (["serve", "--port", "0"], "--port"),
    (["test-all", "--pipeline-cmd", "{python} job.py", "--mutants"], "--mutants"),
    (["test-all", "--pipeline-cmd", "{python} job.py", "--sink", "at-least-once"], "--sink"),
    (["test-all", "--pipeline-cmd", "{python} job.py", "--workload", "counter"], "--workload"),
    (["external", "check", "--cluster", "/nonexistent/cluster.toml"], "--cluster"),
    (["run", "--backend", "ssh"], "--nodes"),
    (["run", "--nodes", "examples/nodes.toml"], "takes no --nodes"),
    (["run", "--backend", "ssh", "--nodes", "/nonexistent/nodes.toml"], "--nodes"),
    (["run", "--backend", "external", "--cluster", "examples/cluster.toml", "--nemesis", "partition"], "--nemesis"),
    (["external", "check", "--cluster", "examples/cluster.toml", "--nemesis", "partition"], "--nemesis"),
    (["external", "check", "--cluster", "examples/cluster.toml", "--nemesis", "bogus"], "--nemesis"),
    (["run", "--nemesis", "kill-broker", "--dry-run"], "--backend external"),
]


@pytest.mark.parametrize("args,names", USAGE, ids=[" ".join(a) for a, _ in USAGE])
def test_usage_errors_exit_254_with_one_line(args, names, tmp_path):
    p = run_cli(args, timeout=60)
    assert p.returncode == 254, (p.returncode, p.stdout, p.stderr)
    assert names.lower() in one_line_error(p).lower()


def test_no_command_prints_help_and_exits_254():
    p = run_cli([], timeout=60)
    assert p.returncode == 254 and "Usage" in p.stdout + p.stderr and "Traceback" not in p.stderr


def test_help_exits_0():
    p = run_cli(["run", "--help"], timeout=60)
    assert p.returncode == 0 and "--time-limit" in p.stdout


def test_help_lists_the_commands_in_their_order():
    group = typer.main.get_command(cli.app)
    assert group.list_commands(typer.Context(group, info_name="onceproof")) == [
        "run", "check", "report", "index", "prune", "serve", "test-all", "shrink", "faults", "deps", "nemesis", "heal",
        "watch", "cluster", "session", "ssh", "external"]
    p = run_cli(["--help"], timeout=60)
    assert p.returncode == 0, p.stderr
    assert [c for c in ("run", "check", "test-all", "faults", "deps", "cluster")
            if f"│ {c} " in p.stdout] == ["run", "check", "test-all", "faults", "deps", "cluster"], p.stdout


def test_help_imports_neither_pyspark_nor_plotly():
    """The CLI's start-up: ``onceproof --help`` (and every usage error) stays clear of the heavy imports."""
    code = ("import sys; from onceproof.harness.cli import main; main(['--help']); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'pyspark', 'plotly', 'py4j'}))")
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == "[]", p.stdout[-2000:]


def test_console_script_goes_through_main(tmp_path):
    script = Path(sys.executable).parent / "onceproof"
    if not script.exists():
        pytest.skip("no console script installed next to this Python")
    p = subprocess.run([str(script), "run", "--time-limit", "nan", "--results", str(tmp_path / "r")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 254 and "--time-limit" in one_line_error(p)
    assert not (tmp_path / "r").exists()


# ------------------------------------------------------------------------------ run validation: 254

BAD = [
    ("--time-limit", "nan"), ("--time-limit", "0"), ("--time-limit", "inf"), ("--time-limit", "-5"),
    ("--nemesis-interval", "0"), ("--nemesis-interval", "nan"), ("--recovery-timeout", "-1"),
    ("--startup-timeout", "nan"), ("--fault-hold", "-1"), ("--fault-hold", "0"), ("--txn-timeout-ms", "-5"),
    ("--txn-timeout-ms", "1000"), ("--txn-timeout-ms", "1000000"), ("--trigger-ms", "0"), ("--rate", "nan"),
    ("--rate", "-3"), ("--keys", "0"), ("--seed", "-1"), ("--max-offsets", "0"), ("--partitions", "0"),
    ("--brokers", "0"), ("--brokers", "12"), ("--max-run-factor", "0.5"), ("--keep-last", "-1"),
    ("--sink", "eos-typo"), ("--nemesis", "kill-broker:nowhere"), ("--test-name", "../escape"),
    ("--test-name", "latest"), ("--master", " "),
]


@pytest.mark.parametrize("option,value", BAD, ids=[f"{o}={v}" for o, v in BAD])
def test_run_rejects_bad_option_before_anything_starts(option, value, tmp_path):
    results = tmp_path / "results"
    t0 = time.monotonic()
    p = run_cli(["run", option, value, "--results", str(results)], timeout=60)
    took = time.monotonic() - t0
    assert p.returncode == 254, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    assert option in one_line_error(p)
    assert not results.exists(), "a run directory was created for an invalid run"
    assert took < 30, f"validation took {took:.0f}s: something started"


def test_results_root_that_is_a_file_is_a_usage_error(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    p = run_cli(["run", "--results", str(f)], timeout=60)
    assert p.returncode == 254 and "--results" in one_line_error(p)


def test_every_number_field_rejects_non_finite_values():
    """Generic over TestConfig: a new numeric option is validated without anyone remembering to."""
    seen = 0
    for f in fields(TestConfig):
        d = TestConfig.default_of(f)
        if isinstance(d, bool) or not isinstance(d, (int, float)):
            continue
        seen += 1
        for bad in ([math.nan, math.inf, -math.inf] if isinstance(d, float) else [-10**12]):
            with pytest.raises(ConfigError) as e:
                TestConfig(**{f.name: bad}).validate()
            assert e.value.option == TestConfig.flag(f), (f.name, bad)
    assert seen >= 10


def test_defaults_are_valid():
    TestConfig().validate()


# --------------------------------------------------------------------------------------- crashes: 255


def _run_dir(root: Path) -> Path:
    """A stored run with a damaged output.parquet: `check` crashes reading it."""
    import pandas as pd

    d = root / "t" / "20250101T000000"
    d.mkdir(parents=True)
    pd.DataFrame({"key": ["a"], "seq": [0], "partition": [0], "offset": [0]}).to_parquet(d / "input.parquet")
    (d / "output.parquet").write_bytes(b"PAR1 this is not parquet")
    return d


def test_check_crash_is_one_line_with_traceback_in_run_dir(tmp_path):
    d = _run_dir(tmp_path)
    p = run_cli(["check", str(d)], timeout=120)
    assert p.returncode == 255, (p.stdout, p.stderr)
    line = one_line_error(p)
    assert "output.parquet" in line and "check-error.log" in line
    log = d / "logs" / "check-error.log"
    assert "Traceback" in log.read_text()


def test_check_crash_traceback_goes_to_a_temp_file_when_the_run_dir_cannot_take_it(tmp_path):
    d = _run_dir(tmp_path)
    (d / "logs").write_text("a file where the logs directory should be")
    p = run_cli(["check", str(d)], timeout=120)
    assert p.returncode == 255
    line = one_line_error(p)
    where = Path(line.rsplit("(traceback: ", 1)[1].rstrip(")"))
    try:
        assert where.parent != d / "logs" and "Traceback" in where.read_text()
    finally:
        where.unlink(missing_ok=True)


def test_report_crash_is_one_line(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "results.json").write_text(json.dumps({"verdict": "valid", "counts": {}}))
    (d / "report.html").mkdir()  # the report cannot be written over a directory
    p = run_cli(["report", str(d)], timeout=120)
    assert p.returncode == 255, (p.stdout, p.stderr)
    assert "report-error.log" in one_line_error(p)
    assert "Traceback" in (d / "logs" / "report-error.log").read_text()


def test_run_crash_is_255_without_traceback_on_the_console(tmp_path):
    """The cluster cannot start (no java): the runner's crash path, no process is started."""
    results = tmp_path / "results"
    env = dict(os.environ, JAVA_HOME=str(tmp_path / "no-java"), COLUMNS="160")
    p = subprocess.run([sys.executable, "-m", "onceproof.harness.cli", "run", "--time-limit", "1", "--results",
                        str(results)], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 255, (p.stdout[-3000:], p.stderr[-3000:])
    assert "Traceback" not in p.stdout + p.stderr, p.stdout + p.stderr
    assert "java" in (p.stdout + p.stderr).lower()
    run_dir = (results / "latest").resolve()
    assert json.loads((run_dir / "results.json").read_text())["verdict"] == "crashed"
    logs = "".join(f.read_text() for f in (run_dir / "logs").glob("*.log"))
    assert "Traceback" in logs, "the traceback should be kept in the run's logs"


def test_run_dry_run_prints_every_command_of_the_fault_map_and_runs_none(tmp_path):
    p = run_cli(["run", "--backend", "external", "--cluster", "examples/cluster.toml", "--nemesis",
                 "kill-broker,kill-driver-in-commit-window", "--dry-run", "--results", str(tmp_path)], timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    for k in (1, 2, 3):  # one run and one heal per broker, rendered as a run renders them
        assert f"docker compose -p onceproof-ext kill -s KILL kafka{k}" in out
        assert f"docker compose -p onceproof-ext start kafka{k}" in out
    assert "docker pause 'onceproof-01234567-driver-<incarnation>'" in out and "create topics:" in out
    assert not any(tmp_path.iterdir()), "a dry run wrote results"
