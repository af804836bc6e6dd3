"""`onceproof cluster status/down` without a real cluster: the default directory does not depend on the
working directory, and `down` signals only a process whose command line proves it is that cluster's
broker; a stale pid in a (doctored) state file is left alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO


def cli(args: list[str], cwd: Path = REPO, cache: Path | None = None, timeout: float = 120):
    env = dict(os.environ, COLUMNS="200")
    if cache is not None:
        env["ONCEPROOF_CACHE"] = str(cache)
    return subprocess.run([sys.executable, "-m", "onceproof.harness.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def write_state(d: Path, pids: dict[int, int | None], base: int = 45090) -> None:
    """A ``cluster.json`` as ``cluster up`` writes it, naming ``pids`` as the brokers."""
    d.mkdir(parents=True, exist_ok=True)
    state = {"bootstrap": ",".join(f"127.0.0.1:{base + i}" for i in pids), "cluster_id": "x", "version": "4.1.1",
             "spec": {"nodes": len(pids), "base_port": base, "heap_mb": 512, "log_dir": str(d / "logs"),
                      "proxied": False},
             "brokers": {str(i): {"pid": pid, "client_port": base + i} for i, pid in pids.items()}}
    (d / "cluster.json").write_text(json.dumps(state))


def spawn(argv: list[str]) -> subprocess.Popen:
    # its own process group, as brokers are: a killpg on its pid would reach it
    return subprocess.Popen(argv, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture
def cache(tmp_path):
    return tmp_path / "cache"


def test_down_leaves_an_unrelated_process_named_by_a_stale_state_alone(tmp_path, cache):
    d = tmp_path / "cluster"
    sleeper = spawn(["sleep", "60"])
    try:
        write_state(d, {1: sleeper.pid})
        st = cli(["cluster", "status", "--dir", str(d)], cache=cache)
        assert st.returncode == 1 and "stale" in st.stdout, st.stdout + st.stderr
        down = cli(["cluster", "down", "--dir", str(d)], cache=cache)
        assert down.returncode == 0, down.stdout + down.stderr
        assert "left alone" in down.stdout
        time.sleep(0.5)
        assert sleeper.poll() is None, "cluster down killed a process that is not its broker"
    finally:
        sleeper.kill()
        sleeper.wait()


def test_down_stops_a_process_that_is_this_clusters_broker(tmp_path, cache):
    """The same check lets a real broker through: a process whose command line is `... kafka.Kafka
    <dir>/node1/server.properties` is stopped."""
    d = tmp_path / "cluster"
    cfg = d.resolve() / "node1" / "server.properties"
    fake = spawn([sys.executable, "-c", "import time; time.sleep(60)", "kafka.Kafka", str(cfg)])
    try:
        write_state(d, {1: fake.pid})
        st = cli(["cluster", "status", "--dir", str(d)], cache=cache)
        assert st.returncode == 0 and " up" in st.stdout, st.stdout + st.stderr
        down = cli(["cluster", "down", "--dir", str(d)], cache=cache)
        assert down.returncode == 0 and "left alone" not in down.stdout, down.stdout
        fake.wait(timeout=20)
    finally:
        if fake.poll() is None:
            fake.kill()
    assert json.loads((d / "cluster.json").read_text())["brokers"]["1"]["pid"] is None


def test_a_broker_of_another_cluster_dir_is_not_ours(tmp_path, cache):
    other = (tmp_path / "other" / "node1" / "server.properties").resolve()
    fake = spawn([sys.executable, "-c", "import time; time.sleep(60)", "kafka.Kafka", str(other)])
    try:
        write_state(tmp_path / "cluster", {1: fake.pid})
        down = cli(["cluster", "down", "--dir", str(tmp_path / "cluster")], cache=cache)
        assert down.returncode == 0 and "left alone" in down.stdout
        time.sleep(0.5)
        assert fake.poll() is None
    finally:
        fake.kill()
        fake.wait()


def test_status_finds_the_default_dir_from_any_working_directory(tmp_path, cache):
    default = cache / "cluster"
    write_state(default, {1: None, 2: None, 3: None}, base=46090)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for cwd in (elsewhere, REPO):
        st = cli(["cluster", "status"], cwd=cwd, cache=cache)
        assert "127.0.0.1:46091" in st.stdout and st.stdout.count(" down") == 3, (cwd, st.stdout, st.stderr)
        assert st.returncode == 1  # all down
    down = cli(["cluster", "down"], cwd=elsewhere, cache=cache)
    assert down.returncode == 0 and "cluster stopped" in down.stdout


def test_default_dir_is_absolute_and_shown_in_help(cache):
    h = cli(["cluster", "status", "--help"], cache=cache)
    assert h.returncode == 0
    text = " ".join(h.stdout.replace("│", " ").split())
    assert str(cache / "cluster") in text.replace(" ", "") or str(cache / "cluster") in text, h.stdout
    assert "~/.cache/onceproof/cluster" in text


def test_status_without_state_says_how_to_start_one(tmp_path, cache):
    st = cli(["cluster", "status", "--dir", str(tmp_path / "none")], cache=cache)
    assert st.returncode == 1 and "cluster up" in st.stdout
