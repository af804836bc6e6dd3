"""The process reaper (backends/common/reaper.py) with real processes: a stand-in harness starts a
process in a session of its own, untied (as a driver's JVM or an executor is to the harness), and the
reaper; once the harness is SIGKILLed the reaper kills that process and exits. A run that ends normally
stops the reaper and nothing of the run is touched."""

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil

from onceproof.backends.common import processes

HARNESS = textwrap.dedent("""
    import os, pathlib, subprocess, sys, time
    from onceproof.backends.common import reaper
    os.environ["ONCEPROOF_RUN"] = sys.argv[1]
    os.makedirs(sys.argv[1], exist_ok=True)
    for d in sys.argv[3:]:  # made outside the run directory, noted for the reaper
        os.makedirs(d)
        reaper.note_scratch(pathlib.Path(d))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    w = reaper.start(sys.argv[1])
    print(child.pid, w.pid, flush=True)
    if sys.argv[2] == "stop":
        reaper.stop_watcher(w)
        print("stopped", w.returncode, flush=True)
    time.sleep(120)
""")


@contextlib.contextmanager
def _started(tmp_path, how, *scratch):
    """``(run dir, harness Popen, child pid, watcher pid)`` of a stand-in harness that noted the ``scratch``
    directories; all three SIGKILLed after."""
    run = str(tmp_path / "run")
    h = subprocess.Popen([sys.executable, "-c", HARNESS, run, how, *map(str, scratch)], stdout=subprocess.PIPE,
                         text=True)
    child, watcher = (int(x) for x in h.stdout.readline().split())
    try:
        yield run, h, child, watcher
    finally:
        for pid in (child, watcher, h.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        h.wait(timeout=5)
        h.stdout.close()


def _gone(pid, within_s):
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not processes.alive(pid):
            return True
        time.sleep(0.1)
    return False


def test_a_sigkilled_harness_takes_its_run_processes_with_it(tmp_path):
    ours, foreign = tmp_path / "onceproof-pg-x", tmp_path / "not-ours"
    with _started(tmp_path, "wait", ours, foreign) as (run, h, child, watcher):
        assert [p.pid for p in processes.run_processes(run, psutil.Process(h.pid).create_time())] \
            and processes.alive(child)
        time.sleep(0.5)
        assert processes.alive(child), "the reaper must leave a live harness's processes alone"
        os.kill(h.pid, signal.SIGKILL)
        h.wait(timeout=5)
        assert _gone(child, 5.0), "the run's process outlived the harness by 5 s"
        assert _gone(watcher, 5.0), "the reaper did not exit after its sweep"
    assert not ours.exists(), "the noted scratch directory outlived the harness"
    assert foreign.is_dir(), "the reaper removed a directory not named onceproof-*"


def test_a_stopped_reaper_exits_and_kills_nothing(tmp_path):
    with _started(tmp_path, "stop") as (run, h, child, watcher):
        assert h.stdout.readline().split()[0] == "stopped"
        assert _gone(watcher, 5.0)
        os.kill(h.pid, signal.SIGKILL)
        h.wait(timeout=5)
        time.sleep(1.5)
        assert processes.alive(child), "a stopped reaper swept the run anyway"
