"""``backends/ssh/node_helper.py`` (``onceproof-node.py``) run on this machine as a node would run it: real
processes started, read, signalled and swept through its command line, each answer one JSON line. The SSH
side is tested against real sshd in ``tests/docker/test_ssh_node.py``; this is the fast check of the rules."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import psutil
import pytest

from onceproof.backends.ssh import node_helper

HELPER = node_helper.__file__


def _call(root, run, *args: str) -> dict:
    p = subprocess.run([sys.executable, HELPER, args[0], "--root", str(root), "--run", run, *args[1:]],
                       capture_output=True, text=True, timeout=60)
    return json.loads(p.stdout.strip().splitlines()[-1])


def _wait(cond, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def run():
    return "u" + uuid.uuid4().hex[:11]


def test_start_status_signal_and_the_exit_record(tmp_path, run):
    log = tmp_path / "logs" / "sleeper.log"
    got = _call(tmp_path, run, "start", "--name", "sleeper", "--log", str(log), "--env", "GREETING=hi", "--",
                "sh", "-c", 'echo "$GREETING $ONCEPROOF_RUN"; exec sleep 60')
    pid = got["pid"]
    assert psutil.Process(pid).environ()["ONCEPROOF_RUN"] == run
    _wait(lambda: log.exists() and log.read_text().strip() == f"hi {run}")
    assert _call(tmp_path, run, "status", "--name", "sleeper")["state"] in ("sleeping", "running")
    assert _call(tmp_path, run, "signal", "--name", "sleeper", "--sig", "STOP")["sent"]
    _wait(lambda: _call(tmp_path, run, "status", "--name", "sleeper")["state"] == "stopped")
    assert _call(tmp_path, run, "signal", "--name", "sleeper", "--sig", "KILL")["sent"]
    _wait(lambda: _call(tmp_path, run, "status", "--name", "sleeper")["exit"] is not None)
    st = _call(tmp_path, run, "status", "--name", "sleeper")
    assert st["state"] == "gone" and st["exit"]["signal"] == 9
    assert _call(tmp_path, run, "signal", "--name", "sleeper")["why"] == "gone"
    assert "no process named" in _call(tmp_path, run, "status", "--name", "nobody")["error"]


def test_sweep_kills_the_groups_and_every_process_tagged_with_the_run(tmp_path, run):
    a = _call(tmp_path, run, "start", "--name", "a", "--log", str(tmp_path / "a.log"), "--",
              "sh", "-c", "sleep 60 & sleep 60")["pid"]
    # a process that left its group but keeps the run's tag, as a daemonised child would
    stray = subprocess.Popen(["sleep", "60"], env={"ONCEPROOF_RUN": run, "PATH": "/usr/bin:/bin"},
                             start_new_session=True)
    other = subprocess.Popen(["sleep", "60"], env={"ONCEPROOF_RUN": run + "x", "PATH": "/usr/bin:/bin"})
    try:
        out = _call(tmp_path, run, "sweep")
        assert [g["pid"] for g in out["groups_killed"]] == [a] and stray.pid in out["tagged_killed"]
        assert stray.wait(10) == -9
        assert other.poll() is None, "another run's process was swept"
        _wait(lambda: not psutil.pid_exists(a) or psutil.Process(a).status() == psutil.STATUS_ZOMBIE)
        assert json.loads((tmp_path / "runs" / run / "swept.json").read_text())["left"] == []
    finally:
        other.kill()
        stray.kill()


def test_bad_arguments_are_refused_with_exit_2(tmp_path):
    p = subprocess.run([sys.executable, HELPER, "start", "--root", str(tmp_path), "--run", "../etc", "--name", "x",
                        "--log", "/dev/null", "--", "true"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "bad --run" in p.stdout


def test_executors_are_found_above_a_task_read_and_killed_alone_only_while_still_ours(tmp_path, run):
    # a stand-in executor JVM (its command line names Spark's executor main) with a "Python worker" child,
    # started as the node's Spark worker starts one: tagged with the run through the environment
    exe = _call(tmp_path, run, "start", "--name", "worker-1", "--log", str(tmp_path / "w.log"), "--",
                "sh", "-c", "sleep 60 & exec python3 -c 'import time; time.sleep(60)' "
                "org.apache.spark.executor.CoarseGrainedExecutorBackend --executor-id 7")["pid"]
    _wait(lambda: "CoarseGrainedExecutorBackend" in " ".join(psutil.Process(exe).cmdline()))
    _wait(lambda: len(psutil.Process(exe).children()) == 1)
    task = psutil.Process(exe).children()[0].pid
    other = subprocess.Popen(["sh", "-c", "exec python3 -c 'import time; time.sleep(60)' "
                              "org.apache.spark.executor.CoarseGrainedExecutorBackend --executor-id 8"],
                             env={"ONCEPROOF_RUN": run + "x", "PATH": "/usr/bin:/bin"})
    try:
        listed = _call(tmp_path, run, "executors")["executors"]
        assert [(e["pid"], e["id"]) for e in listed] == [(exe, "7")], listed  # not the other run's
        started = listed[0]["started"]
        assert abs(started - psutil.Process(exe).create_time()) < 0.05 and listed[0]["cpu_s"] >= 0
        assert _call(tmp_path, run, "executors", "--pid", str(task))["executors"][0]["pid"] == exe
        assert _call(tmp_path, run, "executors", "--pid", str(other.pid))["executors"] == []
        # a start time that is not the process's: the pid is taken to be another process now, never signalled
        assert _call(tmp_path, run, "kill-executor", "--pid", str(exe), "--started", repr(started + 5)) == \
            {"gone": True, "why": "foreign"}
        assert psutil.Process(exe).status() != psutil.STATUS_ZOMBIE
        got = _call(tmp_path, run, "kill-executor", "--pid", str(exe), "--started", repr(started))
        assert got["gone"] and "why" not in got, got
        assert psutil.pid_exists(task), "the executor alone is killed, not its children"
        assert other.poll() is None
    finally:
        other.kill()
        _call(tmp_path, run, "sweep")


def test_disk_mounts_fills_empties_and_the_sweep_unmounts_only_inside_the_run(tmp_path, run):
    """The ``disk`` command on this machine as a node would run it (root: the tmpfs is real; skipped
    without the privilege, as ``disk-full`` is)."""
    data = tmp_path / "runs" / run / "kafka" / "data"
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    assert "inside the run's directory" in _call(tmp_path, run, "disk", "--op", "fill", "--path", str(outside))["error"]
    assert "refusing to fill" in _call(tmp_path, run, "disk", "--op", "fill", "--path", str(data))["error"]
    got = _call(tmp_path, run, "disk", "--op", "mount", "--path", str(data), "--mb", "4")
    if "error" in got:
        pytest.skip(f"no tmpfs here: {got['error']}")
    try:
        assert got["mounted"] == str(data.resolve())
        (data / "00000000000000000000.log").write_bytes(b"x" * 1000)
        fill = _call(tmp_path, run, "disk", "--op", "fill", "--path", str(data))
        assert fill["free_after"] == 0 and fill["size_bytes"] == 4 << 20 and fill["filled_bytes"] > 3 << 20, fill
        with pytest.raises(OSError, match="No space left"):
            (data / "more").write_bytes(b"y" * 8192)
        assert _call(tmp_path, run, "disk", "--op", "unfill", "--path", str(data))["freed"] == fill["filled_bytes"]
        assert (data / "00000000000000000000.log").stat().st_size == 1000  # the broker's files stay
        swept = _call(tmp_path, run, "sweep")
        assert swept["mounts_removed"] == [str(data.resolve())]
        assert str(data.resolve()) not in open("/proc/self/mounts").read()
    finally:
        subprocess.run(["umount", "-l", str(data)], capture_output=True)
