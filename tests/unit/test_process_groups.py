"""``processes.stop_group`` with real processes: a child that exits on SIGTERM is a zombie until its parent
collects it, and the stop must see it gone then (not wait out the grace and SIGKILL a dead group)."""

import os
import signal
import sys
import time

import psutil

from onceproof.backends.common import processes


def test_a_child_that_exits_on_sigterm_is_stopped_without_a_sigkill_and_reaped(tmp_path, monkeypatch):
    child = processes.spawn([sys.executable, "-c", "import time; time.sleep(120)"], log_path=tmp_path / "child.log")
    # as the local backend keeps only a broker's pid: nobody waits on this Popen
    sent: list[int] = []
    real_killpg = os.killpg

    def killpg(pgid: int, sig: int) -> None:
        sent.append(sig)
        real_killpg(pgid, sig)
    monkeypatch.setattr(os, "killpg", killpg)
    processes.stop_group(child.pid, grace_s=60)
    assert signal.SIGTERM in sent and signal.SIGKILL not in sent, sent
    assert not psutil.pid_exists(child.pid), "the exited child was left a zombie"
    assert processes.group_members(child.pid) == []


def test_group_members_leaves_out_a_zombie_and_a_running_member_is_one(tmp_path):
    child = processes.spawn([sys.executable, "-c", "import time; time.sleep(120)"], log_path=tmp_path / "child.log")
    try:
        assert [p.pid for p in processes.group_members(child.pid)] == [child.pid]
        os.kill(child.pid, signal.SIGKILL)
        for _ in range(100):  # not collected: a zombie once the kernel has ended it
            if psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE:
                break
            time.sleep(0.1)
        assert psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE
        assert processes.group_members(child.pid) == []
    finally:
        child.kill()
        child.wait()


LEADER_EXITS_FIRST = ("import ctypes, threading, time; threading.Thread(target=time.sleep, args=(120,)).start(); "
                      "time.sleep(0.2); ctypes.CDLL(None).pthread_exit(None)")
"""A process whose main thread ends while another runs: Linux shows it ``Z``, and ``waitpid`` cannot collect it."""


def test_a_zombie_leader_with_a_thread_still_running_is_a_member_until_killed_and_collected(tmp_path):
    child = processes.spawn([sys.executable, "-c", LEADER_EXITS_FIRST], log_path=tmp_path / "child.log")
    try:
        for _ in range(100):
            if psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE:
                break
            time.sleep(0.1)
        assert psutil.Process(child.pid).num_threads() > 1, "the other thread should still run"
        assert [p.pid for p in processes.group_members(child.pid)] == [child.pid], "not gone yet"
        processes.kill_group(child.pid)
        assert processes.status(child.pid) == "gone"
    finally:
        if psutil.pid_exists(child.pid):
            child.kill()
            child.wait()
