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


def our_processes(marker: str, exclude: set[int] | None = None) -> list[psutil.Process]:
    """Live processes whose command line or ``ONCEPROOF_RUN`` environment names ``marker`` (a run's
    directory): brokers, toxiproxy, the Python driver and its JVM, executor JVMs, and PySpark's Python
    daemon and workers (all inherit ``ONCEPROOF_RUN``). This test process, its ancestors and ``exclude``
    (e.g. the harness under test while it is still expected to run) do not count."""
    me = psutil.Process()
    skip = {me.pid, *(a.pid for a in me.parents()), *(exclude or ())}
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if p.pid in skip or p.status() == psutil.STATUS_ZOMBIE:
                continue
            cmd = " ".join(p.info["cmdline"] or [])
            env = p.environ().get("ONCEPROOF_RUN", "")
            if marker in cmd or marker in env:
                out.append(p)
        except psutil.Error:
            continue
    return out


def our_jvms(marker: str) -> list[psutil.Process]:
    """The Java processes among :func:`our_processes`."""
    out = []
    for p in our_processes(marker):
        try:
            if "java" in p.name():
                out.append(p)
        except psutil.Error:
            continue
    return out


def run_cli(args: list[str], timeout: float = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="160")
    return subprocess.run(ONCEPROOF + args, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def load_run(results_root: Path) -> tuple[Path, dict, list[dict]]:
    """(run dir, results.json, nemesis ops) of the newest run under ``results_root``."""
    return load_run_dir((results_root / "latest").resolve())


def load_run_dir(run_dir: Path) -> tuple[Path, dict, list[dict]]:
    """(run dir, results.json, nemesis ops as dicts) of one run directory."""
    result = json.loads((run_dir / "results.json").read_text())
    ops = [json.loads(l) for l in (run_dir / "nemesis.jsonl").read_text().splitlines() if l.strip()]
    return run_dir, result, ops


@pytest.fixture
def results_root(tmp_path):
    return tmp_path / "results"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A real 3-broker KRaft cluster shared by one test module (started once per module, always stopped)."""
    from backends.local.kafka import KafkaCluster
    from backends.local.layout import ClusterSpec
    from backends.local.ports import free_base_port

    c = KafkaCluster(ClusterSpec(tmp_path_factory.mktemp("kafka"), base_port=free_base_port()))
    try:
        c.up()
        yield c
    finally:
        c.down()
