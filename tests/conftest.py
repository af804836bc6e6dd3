"""Shared fixtures: the real CLI as a subprocess, and a check that no JVM of ours is left behind."""

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parent.parent
ONCEPROOF = [sys.executable, "-m", "harness.cli"]


def our_jvms(marker: str) -> list[psutil.Process]:
    """Live Java processes whose command line or ``ONCEPROOF_RUN`` environment names ``marker`` (a run's
    directory): brokers, the driver JVM and executor JVMs (which inherit the driver's environment)."""
    out = []
    for p in psutil.process_iter(["name", "cmdline"]):
        try:
            if "java" not in (p.info["name"] or ""):
                continue
            cmd = " ".join(p.info["cmdline"] or [])
            env = p.environ().get("ONCEPROOF_RUN", "")
            if p.status() != psutil.STATUS_ZOMBIE and (marker in cmd or marker in env):
                out.append(p)
        except psutil.Error:
            continue
    return out


def run_cli(args: list[str], timeout: float = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="160")
    return subprocess.run(ONCEPROOF + args, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def load_run(results_root: Path) -> tuple[Path, dict, list[dict]]:
    """(run dir, results.json, nemesis ops) of the newest run under ``results_root``."""
    run_dir = (results_root / "latest").resolve()
    result = json.loads((run_dir / "results.json").read_text())
    ops = [json.loads(l) for l in (run_dir / "nemesis.jsonl").read_text().splitlines() if l.strip()]
    return run_dir, result, ops


@pytest.fixture
def results_root(tmp_path):
    return tmp_path / "results"
