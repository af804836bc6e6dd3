"""Everything started is stopped: Ctrl-C in the middle of a run, and `cluster up` / `cluster down`."""

import json
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO, our_jvms, run_cli

pytestmark = pytest.mark.cluster


def test_ctrl_c_mid_run_leaves_no_jvm_and_keeps_the_history(results_root):
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "run", "--nemesis", "kill-executor",
                             "--time-limit", "600", "--results", str(results_root)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        ready = None
        while time.monotonic() < deadline:
            latest = results_root / "latest"
            if (latest / "control" / "driver.ready").exists() and (latest / "history.jsonl").stat().st_size > 0:
                ready = latest.resolve()
                break
            assert proc.poll() is None, proc.stdout.read()
            time.sleep(1)
        assert ready, "the run never got its pipeline up"
        time.sleep(5)
        assert our_jvms(str(ready)), "expected brokers/driver/executors to be running mid-run"
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 255, out[-3000:]
    result = json.loads((ready / "results.json").read_text())
    assert result["verdict"] == "crashed" and "interrupted" in result["error"]
    assert sum(1 for _ in (ready / "history.jsonl").open()) > 10
    deadline = time.monotonic() + 15
    while our_jvms(str(ready)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not our_jvms(str(ready)), [p.cmdline()[:3] for p in our_jvms(str(ready))]


def test_cluster_up_status_down(tmp_path):
    d = tmp_path / "cluster"
    up = run_cli(["cluster", "up", "--dir", str(d)], timeout=300)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        bootstrap = up.stdout.strip().splitlines()[-1]
        assert bootstrap.count("127.0.0.1:") == 3
        st = run_cli(["cluster", "status", "--dir", str(d)])
        assert st.returncode == 0 and st.stdout.count(" up") == 3, st.stdout
        again = run_cli(["cluster", "up", "--dir", str(d)], timeout=60)
        assert again.returncode == 1 and "already running" in again.stdout
        from confluent_kafka.admin import AdminClient
        md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
        assert len(md.brokers) == 3
    finally:
        down = run_cli(["cluster", "down", "--dir", str(d)], timeout=120)
    assert down.returncode == 0
    assert not our_jvms(str(d))
    st = run_cli(["cluster", "status", "--dir", str(d)])
    assert st.returncode == 1 and "down" in st.stdout
