"""Child processes that never outlive the harness.

Every JVM the harness starts (brokers, the Spark driver and, through it, the executors) is started here:

* in a new session, so the process and everything it forks (Spark's executor JVMs and Python workers)
  share one process group that :func:`stop_group` can signal at once;
* with ``PR_SET_PDEATHSIG = SIGKILL`` (Linux ``prctl(2)``) when ``tie_to_parent`` is true, so a harness
  that is itself SIGKILLed still takes its brokers and driver with it.

``onceproof cluster up`` starts brokers *without* the tie so that they outlive the command; their pids
are kept in a pid file and ``cluster down`` stops them.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import psutil

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class _Spawner:
    """One long-lived thread that does every fork.

    ``PR_SET_PDEATHSIG`` fires when the *thread* that forked the child exits, not the process: a broker
    restarted from the nemesis thread would be SIGKILLed when that thread finished its schedule. So
    every tied spawn happens on this daemon thread, which lives as long as the harness process.
    """

    def __init__(self):
        self._q: queue.Queue = queue.Queue()
        self._t = threading.Thread(target=self._loop, name="spawner", daemon=True)
        self._t.start()

    def _loop(self):
        while True:
            fn, box, done = self._q.get()
            try:
                box.append((True, fn()))
            except BaseException as e:  # noqa: BLE001 - handed back to the caller
                box.append((False, e))
            done.set()

    def call(self, fn):
        if threading.current_thread() is self._t:
            return fn()
        box: list = []
        done = threading.Event()
        self._q.put((fn, box, done))
        done.wait()
        ok, val = box[0]
        if not ok:
            raise val
        return val


_spawner: _Spawner | None = None
_spawner_lock = threading.Lock()


def _on_spawner(fn):
    global _spawner
    with _spawner_lock:
        if _spawner is None:
            _spawner = _Spawner()
    return _spawner.call(fn)


def spawn(
    argv: Sequence[str],
    *,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    tie_to_parent: bool = True,
    user: str | None = None,
) -> subprocess.Popen:
    """Start ``argv`` in its own process group with stdout+stderr appended to ``log_path``.

    Args:
        argv: program and arguments.
        log_path: file receiving both output streams (created with its parent directory).
        env: full environment for the child (``None`` inherits ours). ``ONCEPROOF_RUN`` (the run
            directory, set by the runner) is passed on so that leftover processes can be traced to a run.
        cwd: working directory.
        tie_to_parent: SIGKILL the child when the spawning thread's process dies (``prctl``).
        user: run the child as this user and its primary group, no supplementary groups (a server that
            refuses root, e.g. PostgreSQL); ``None`` = as we run. The ``prctl`` is set after the switch.

    Returns: the ``Popen``; its ``pid`` is also the process-group id.

    Raises: ``FileNotFoundError`` when the program does not exist.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = dict(env if env is not None else os.environ)
    env.setdefault("ONCEPROOF_RUN", os.environ.get("ONCEPROOF_RUN", ""))
    log = open(log_path, "ab", buffering=0)
    try:
        return _on_spawner(lambda: subprocess.Popen(
            list(argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=str(cwd) if cwd else None,
            start_new_session=True,
            preexec_fn=_die_with_parent if tie_to_parent else None,
            **({"user": user, "group": _primary_group(user), "extra_groups": []} if user else {}),
        ))
    finally:
        log.close()


def _primary_group(user: str) -> int:
    return pwd.getpwnam(user).pw_gid


def group_members(pgid: int) -> list[psutil.Process]:
    """All live processes whose process group is ``pgid`` (the group leader may already be gone). A zombie
    whose every thread has ended is not one: it only waits for its parent to collect its status. A zombie
    *leader* whose other threads still run (a JVM's threads finishing a write to a FUSE mount after a
    SIGKILL; Linux shows the leader ``Z`` until the last thread ends, and ``waitpid`` cannot collect it
    yet) still is."""
    out = []
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(p.pid) != pgid or (p.info["status"] == psutil.STATUS_ZOMBIE and p.num_threads() <= 1):
                continue
            out.append(p)
        except (ProcessLookupError, psutil.Error, OSError):
            continue
    return out


def _reap(pid: int) -> None:
    """Collect the exit status of ``pid`` when it is an exited child of this process (``waitpid``, not
    blocking); a no-op for a running or foreign process."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _wait_gone(pgid: int, timeout_s: float, interval_s: float = 0.05) -> bool:
    """Wait up to ``timeout_s`` s, looking every ``interval_s`` s, until group ``pgid`` has no live member,
    then collect its leader's exit status (:func:`_reap`: a harness's child is gone, not a zombie, once
    this returns true). Returns whether the group is gone."""
    deadline = time.monotonic() + timeout_s
    while (left := group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(interval_s)
    _reap(pgid)
    return not left


def stop_group(pgid: int, *, grace_s: float = 10.0) -> None:
    """SIGTERM the process group ``pgid``, wait up to ``grace_s`` seconds, then SIGKILL what is left.

    Also resumes (SIGCONT) the group first, so a paused process can act on SIGTERM. Never raises for
    processes that are already gone.
    """
    for sig in (signal.SIGCONT, signal.SIGTERM):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
    if _wait_gone(pgid, grace_s, interval_s=0.2):
        return
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return
    _wait_gone(pgid, 5.0)


def signal_group(pgid: int, sig: str) -> bool:
    """Send signal ``sig`` (a name such as ``"SIGSTOP"``) to group ``pgid``; False when it is gone."""
    try:
        os.killpg(pgid, getattr(signal, sig))
        return True
    except ProcessLookupError:
        return False


def kill_group(pgid: int) -> None:
    """SIGKILL every process in group ``pgid`` and wait for them to go (at most 5 s; the leader, when this
    process's child, is collected: ``gone``, not a zombie)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return
    _wait_gone(pgid, 5.0)


def status(pid: int | None) -> str:
    """psutil's status of ``pid`` (``"running"``, ``"sleeping"``, ``"stopped"``, ``"zombie"``, ...), or
    ``"gone"`` when there is no such process (or ``pid`` is ``None``)."""
    try:
        return psutil.Process(pid).status() if pid else "gone"
    except psutil.Error:
        return "gone"


def alive(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def same_process_alive(pid: int, started: float) -> bool:
    """True when ``pid`` still runs and is the process that started at ``started`` (epoch s, psutil's
    ``create_time``), not a later one given the same pid; False for a zombie."""
    try:
        p = psutil.Process(pid)
        return abs(p.create_time() - started) < 1.0 and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def run_processes(run_dir: str, since: float, exclude: frozenset[int] = frozenset()) -> list[psutil.Process]:
    """Live processes of run ``run_dir``: those whose environment's ``ONCEPROOF_RUN`` (set by the runner and
    inherited by every process it starts, :func:`spawn`) equals ``run_dir`` and that started at or after
    ``since`` (epoch s), except the pids in ``exclude``. Processes of another user are not seen."""
    out = []
    for p in psutil.process_iter(["create_time"]):
        try:
            if p.pid in exclude or (p.info["create_time"] or 0) < since - 1.0:
                continue
            if p.environ().get("ONCEPROOF_RUN") == run_dir and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (psutil.Error, OSError):
            continue
    return out
