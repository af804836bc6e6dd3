"""The last resort for a harness that is SIGKILLed (or OOM-killed, or crashes in C): a watcher process,
in its own session, that outlives the harness and stops what the run started.

``PR_SET_PDEATHSIG`` (:func:`onceproof.backends.common.processes.spawn`) takes the brokers, toxiproxy
and the Python driver with the harness, but not what *they* started: the driver's JVM exits only when it
sees its stdin close and then runs Spark's shutdown hooks, and meanwhile its executors go on writing to
the output topic (seen for over a minute, into the next run's brokers on the same ports). So a run starts
``python -m onceproof.backends.common.reaper --run-dir <dir> --pid <harness> --start <its start time>``
first. It polls the harness every ``POLL_S`` s; once the harness is gone it SIGKILLs every process whose
``ONCEPROOF_RUN`` is that run directory (:func:`processes.run_processes`) until none is left or
``SWEEP_S`` s have passed, removes the scratch directories the run noted outside its directory
(:func:`note_scratch`, e.g. a PostgreSQL data directory), unmounts the lazyfs layers it noted that are
still mounted (``lose-unsynced-writes``: a killed layer leaves a dead FUSE mount,
:func:`onceproof.backends.common.lazyfs.unmount_noted`) and the iptables chains it noted with their
jumps (``lossy-link:drop``, :func:`onceproof.backends.common.iptables.remove_noted`), puts the clock offset
files it noted back to ``+0`` and removes the dead processes' libfaketime shared memory (``clock-skew``,
:func:`onceproof.backends.common.faketime.reset_noted`), unmounts the brokers' size-limited disks it noted
(``disk-full``, :func:`onceproof.backends.common.tmpfs.unmount_noted`), removes the brokers' cgroups it
noted (``partition:isolate``, :func:`onceproof.backends.common.cgroups.remove_noted`), and exits. A run
that tears down normally stops it (:func:`stop_watcher`).

The Docker backend's reaper (:mod:`onceproof.backends.docker.reaper`) is the same kind of watcher for
containers, started with :func:`start_watcher` too.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from onceproof.backends.common import cgroups, faketime, iptables, lazyfs, processes, tmpfs
from onceproof.checkout import IMPORT_ROOT

POLL_S = 0.5
SWEEP_S = 10.0
SCRATCH = "scratch-dirs.txt"
"""In the run directory: the directories outside it that the run made (one path a line)."""
SCRATCH_PREFIX = "onceproof-"
"""Only directories named so are ever removed from the scratch list."""


def note_scratch(path: Path) -> None:
    """Note ``path`` (a directory named :data:`SCRATCH_PREFIX`…, made outside the run directory) in the
    current run's :data:`SCRATCH` list (the run of ``$ONCEPROOF_RUN``; nothing outside a run), so that the
    reaper removes it when the harness dies before its own teardown does."""
    run = os.environ.get("ONCEPROOF_RUN")
    if run and Path(run).is_dir():
        with open(Path(run) / SCRATCH, "a") as f:
            f.write(f"{path}\n")


def remove_scratch(run_dir: str) -> list[str]:
    """Remove the directories of ``run_dir``'s :data:`SCRATCH` list whose names start with
    :data:`SCRATCH_PREFIX`; returns those removed. Never raises."""
    try:
        lines = (Path(run_dir) / SCRATCH).read_text().splitlines()
    except OSError:
        return []
    gone = []
    for line in lines:
        p = Path(line.strip())
        if p.name.startswith(SCRATCH_PREFIX) and p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
            gone.append(str(p))
    return gone


def start_watcher(module: str, args: list[str]) -> subprocess.Popen:
    """Start ``python -m <module> <args> --pid <this process> --start <its create_time>`` in a new session,
    untied to this process (it must outlive it), with this checkout importable. Returns its ``Popen``."""
    me = psutil.Process()
    argv = [sys.executable, "-m", module, *args, "--pid", str(me.pid), "--start", repr(me.create_time())]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(IMPORT_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, close_fds=True, env=env)


def stop_watcher(proc: subprocess.Popen | None) -> None:
    """Stop a watcher started by :func:`start_watcher` (its job is done) and reap it; ≤ 10 s."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def start(run_dir: str) -> subprocess.Popen:
    """Start the process reaper of run ``run_dir`` (the value of ``ONCEPROOF_RUN``), watching this process."""
    return start_watcher("onceproof.backends.common.reaper", ["--run-dir", run_dir])


def sweep(run_dir: str, since: float, bound_s: float = SWEEP_S) -> list[psutil.Process]:
    """SIGKILL the processes of run ``run_dir`` started at or after ``since`` (epoch s), again and again
    (a dying JVM can still fork) until none is left or ``bound_s`` s have passed. Returns those left."""
    me = frozenset({os.getpid()})
    deadline = time.monotonic() + bound_s
    while True:
        left = processes.run_processes(run_dir, since, exclude=me)
        if not left or time.monotonic() > deadline:
            return left
        for p in left:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(left, timeout=1.0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m onceproof.backends.common.reaper",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", required=True, help="the run directory (ONCEPROOF_RUN of the run's processes)")
    ap.add_argument("--pid", type=int, required=True, help="the harness, whose death triggers the sweep")
    ap.add_argument("--start", type=float, required=True, help="its start time (epoch s, psutil create_time)")
    a = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C goes to the harness, which stops us
    while processes.same_process_alive(a.pid, a.start):
        time.sleep(POLL_S)
    left = sweep(a.run_dir, a.start)
    for m in lazyfs.unmount_noted(a.run_dir):  # before any directory under it is removed
        print(f"reaper: unmounted lazyfs layer {m}", file=sys.stderr)
    remove_scratch(a.run_dir)
    for chain in iptables.remove_noted(a.run_dir):
        print(f"reaper: removed iptables chain {chain}", file=sys.stderr)
    for f in faketime.reset_noted(a.run_dir):
        print(f"reaper: clock offset file {f} back to +0", file=sys.stderr)
    faketime.remove_stale_shm()
    for m in tmpfs.unmount_noted(a.run_dir):
        print(f"reaper: unmounted the broker disk {m}", file=sys.stderr)
    for g in cgroups.remove_noted(a.run_dir):  # after the sweep: a group with a live process stays
        print(f"reaper: removed cgroup {g}", file=sys.stderr)
    for p in left:
        print(f"reaper: left behind: pid {p.pid}", file=sys.stderr)
    return 1 if left else 0


if __name__ == "__main__":
    raise SystemExit(main())
