"""soak/soak.py's handling of one run: a refused time limit is retried at the one the refusal names, and
a run that made no directory of its own is never given an earlier run's results (a fake CLI here: what is
tested is the soak's bookkeeping, not a run)."""

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "soak"))
import soak  # noqa: E402 - after the path: soak/ is a folder of scripts

REFUSAL = ("onceproof run: Invalid value for --time-limit: the 19 faults need about 362s for one turn each, more "
           "than --time-limit 120 × 3 allows: use --time-limit 121 or more (or fewer faults, a shorter "
           "--fault-hold or --txn-timeout-ms)")


def _args(tmp_path):
    return argparse.Namespace(results=tmp_path, time_limit="120", nemesis="all")


def _fake_cli(tmp_path, answers, calls):
    """Each call pops an answer: (returncode, stderr, verdict or None); a verdict makes a new run directory
    and points ``latest`` at it, as the CLI does."""

    def run(argv, **_):
        calls.append(argv[argv.index("--time-limit") + 1])
        rc, err, verdict = answers.pop(0)
        if verdict:
            d = tmp_path / "soak-eos" / f"run{len(calls)}"
            d.mkdir(parents=True)
            (d / "results.json").write_text(json.dumps({"verdict": verdict}))
            latest = tmp_path / "soak-eos" / "latest"
            latest.unlink(missing_ok=True)
            latest.symlink_to(d.name)
        return subprocess.CompletedProcess(argv, rc, "", err)

    return run


def test_time_limit_hint():
    assert soak.time_limit_hint(REFUSAL) == "121"
    assert soak.time_limit_hint("use --time-limit\n  121.5 or more") == "121.5"
    assert soak.time_limit_hint("some other error") is None


def test_a_refused_limit_is_retried_at_the_named_one(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(soak.subprocess, "run", _fake_cli(tmp_path, [(254, REFUSAL, None), (0, "", "valid")], calls))
    p, run_dir, limit = soak._run(_args(tmp_path), "eos", 20, [])
    assert calls == ["120", "121"] and limit == "121" and p.returncode == 0
    assert json.loads((run_dir / "results.json").read_text())["verdict"] == "valid"


def test_a_run_without_its_own_directory_gets_no_earlier_results(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(soak.subprocess, "run", _fake_cli(tmp_path, [(0, "", "valid")], calls))
    soak._run(_args(tmp_path), "eos", 19, [])  # an earlier run leaves latest behind
    monkeypatch.setattr(soak.subprocess, "run", _fake_cli(tmp_path, [(254, "bad --sink", None)], calls))
    p, run_dir, limit = soak._run(_args(tmp_path), "eos", 20, [])
    assert run_dir is None and p.returncode == 254 and limit == "120"
