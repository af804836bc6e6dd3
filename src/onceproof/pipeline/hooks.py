"""Fault-injection hooks inside the pipeline, switched at run time through a control directory.

The nemesis never restarts the job to change a hook: it creates or removes small files in
``<run>/control/`` and the driver looks at them at fixed points of each micro-batch.

Commit window (docs/architecture.md, "The exactly-once sink"): Spark's driver writes ``offsets/N``
before running batch N and ``commits/N`` after the sink returned. Inside ``foreachBatch`` the sink has
committed (eos: every partition's Kafka transaction is committed) when our function returns, and Spark
has not written ``commits/N`` yet. When ``kill-in-commit-window.armed`` exists, the driver writes
``kill-in-commit-window.open`` (atomically, ``{"batch": N, "pid": ...}``), removes the armed file, and
holds the batch for up to ``hold_s`` seconds so the nemesis can SIGKILL it there. If nobody kills it, it
writes ``.missed`` and carries on, and the nemesis reports the fault as not taken.

Graceful stop (``upgrade:graceful``): when ``driver-stop.json`` names the running driver incarnation,
``onceproof.job.await_query`` calls ``query.stop()`` and records it in ``driver-stopped.json``; the
driver process then exits (code 0) and its supervisor restarts it from the same checkpoint.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

ARMED = "kill-in-commit-window.armed"
OPEN = "kill-in-commit-window.open"
MISSED = "kill-in-commit-window.missed"
PRECOMMIT_DELAY = "precommit-delay-ms"   # every sink task sleeps this long between flush and commit
PRECOMMIT_HOLD = "precommit-hold-ms"     # the first sink task to claim it holds its transaction this long
NOTIFY_DELAY = "commit-notify-delay-ms"  # the driver sleeps this long between sink commit and commit log
NOTIFY_LOG = "commit-notify.jsonl"
ZOMBIE = "zombie.{stage}"              # the first sink task of the named partition to reach {stage} turns zombie
ZOMBIE_RELEASE = "zombie.release"      # the nemesis lets every waiting zombie go on
ZOMBIE_PIDS = "zombie.pids"            # one pid per line: what heal() kills if a zombie is still alive
ZOMBIE_STAGES = ("preinit", "precommit")
DRIVER_OVERRIDES = "driver-overrides.json"  # source options a restarted driver starts with (nemesis/upgrade.py)
DRIVER_STOP = "driver-stop.json"        # {"incarnation": n}: that driver incarnation stops its query (query.stop())
DRIVER_STOPPED = "driver-stopped.json"  # what the driver did about it: {"incarnation", "stage", "stop_s", ...}
READY = "driver.ready"
APPS = "driver.apps.jsonl"

HARNESS_WRITES = (ARMED, PRECOMMIT_DELAY, PRECOMMIT_HOLD, NOTIFY_DELAY,
                  *(ZOMBIE.format(stage=s) for s in ZOMBIE_STAGES), ZOMBIE_RELEASE, DRIVER_OVERRIDES, DRIVER_STOP)
"""The control files only the harness creates (the nemeses switching a hook); every other one is written by
the pipeline (driver or tasks) and only read by the harness. A backend whose pipeline runs on other machines
copies the first kind to them and the second kind back (``backends/ssh/relay.py``)."""
PIPELINE_WRITES = (OPEN, MISSED, NOTIFY_LOG, ZOMBIE_PIDS, DRIVER_STOPPED, READY, APPS)
"""The control files the pipeline writes (see :data:`HARNESS_WRITES`); a claimed hold becomes
``<name>.claimed-<...>``."""


class ControlDir:
    """The driver's view of ``<run>/control``. ``path=None`` disables every hook."""

    def __init__(self, path: str | os.PathLike | None, hold_s: float = 60.0):
        self.path = Path(path) if path else None
        self.hold_s = hold_s

    def mark_ready(self, info: dict) -> None:
        """Tell the harness the query is started (pid, query id); overwrites the previous driver's file.
        Creates the control directory when it is missing (a pipeline started by hand, e.g. under
        docker-compose.yml, gets no directory made by the harness)."""
        if self.path is None:
            return
        self.path.mkdir(parents=True, exist_ok=True)
        self._write(READY, {"pid": os.getpid(), "time": time.time(), **info})
        with open(self.path / APPS, "a") as f:  # every incarnation's Spark application id
            f.write(json.dumps({"pid": os.getpid(), "time": time.time(), **info}) + "\n")

    def after_sink_commit(self, batch_id: int) -> None:
        """Run between the sink's commit of batch ``batch_id`` and Spark's ``commits/<batch_id>``.

        Blocks up to ``hold_s`` seconds when the commit-window kill is armed; returns at once otherwise.
        """
        if self.path is None:
            return
        ms = _read_ms(self.path / NOTIFY_DELAY)
        if ms:
            time.sleep(ms / 1000)
            with open(self.path / NOTIFY_LOG, "a") as f:
                f.write(json.dumps({"batch": batch_id, "delay_ms": ms, "time": time.time()}) + "\n")
        armed = self.path / ARMED
        if not armed.exists():
            return
        self._write(OPEN, {"batch": batch_id, "pid": os.getpid(), "time": time.time()})
        armed.unlink(missing_ok=True)
        time.sleep(self.hold_s)
        # Still alive: the nemesis did not come. Leave evidence and carry on.
        try:
            os.replace(self.path / OPEN, self.path / MISSED)
        except FileNotFoundError:
            pass

    def stop_requested(self, incarnation: str | int) -> bool:
        """True when ``<control>/driver-stop.json`` exists and names driver incarnation ``incarnation``
        (``{"incarnation": n}``, written by the ``upgrade:graceful`` fault). A request naming another
        incarnation (an earlier driver's, left behind) is not this driver's; a torn or missing file, or no
        control directory, is no request."""
        if self.path is None:
            return False
        req = read_control(self.path, DRIVER_STOP)
        return req is not None and str(req.get("incarnation")) == str(incarnation)

    def mark_stopped(self, incarnation: str | int, **info) -> None:
        """Write ``<control>/driver-stopped.json`` atomically (a temporary file, then ``os.replace``):
        ``{"incarnation", "pid", "time" (epoch s), **info}``; ``onceproof.job.await_query`` writes it with
        ``stage="stopping"`` before ``query.stop()`` and ``stage="stopped"`` (``stop_s``, ``error``) after."""
        if self.path is None:
            return
        self._write(DRIVER_STOPPED, {"incarnation": str(incarnation), "pid": os.getpid(), "time": time.time(),
                                     **info})

    def _write(self, name: str, obj: dict) -> None:
        write_control(self.path, name, obj)


def write_control(control_dir: str | os.PathLike, name: str, obj) -> None:
    """Write ``obj`` as JSON to ``<control_dir>/<name>`` atomically (``<name>.tmp``, then ``os.replace``):
    a reader polling the file sees the old content or the new, never a torn one."""
    d = Path(control_dir)
    tmp = d / (name + ".tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, d / name)


def read_control(control_dir: str | os.PathLike, name: str) -> dict | None:
    """The JSON object in ``<control_dir>/<name>``, or ``None`` when the file is missing, torn or not an
    object."""
    try:
        v = json.loads((Path(control_dir) / name).read_text())
    except (FileNotFoundError, ValueError):
        return None
    return v if isinstance(v, dict) else None


def release_holds(control_dir: str | os.PathLike) -> int:
    """Let every task parked by a claimed pre-commit hold go on at once (``precommit_delay`` waits only
    while its ``precommit-hold-ms.claimed-*`` file exists) and withdraw an unclaimed hold. Returns the
    number of claimed holds released."""
    d = Path(control_dir)
    (d / PRECOMMIT_HOLD).unlink(missing_ok=True)
    n = 0
    for f in d.glob(f"{PRECOMMIT_HOLD}.claimed-*"):
        f.unlink(missing_ok=True)
        n += 1
    return n


def _read_ms(path: Path) -> int:
    try:
        return max(0, int(path.read_text().strip() or 0))
    except (FileNotFoundError, ValueError):
        return 0


def _hold_spec(path: Path) -> dict:
    """``precommit-hold-ms`` holds either a plain number of ms (any task may claim it) or JSON
    ``{"ms": N, "partition": P}`` (only a task of sink partition P may: ``kill-executor`` aims this way).

    Raises: ``FileNotFoundError`` when there is no hold to claim.
    """
    text = path.read_text().strip()
    try:
        spec = json.loads(text or "0")
    except ValueError:
        return {"ms": 0}
    return spec if isinstance(spec, dict) else {"ms": spec}


def _hold_partition(path: Path) -> int | None:
    p = _hold_spec(path).get("partition")
    return int(p) if p is not None else None


def _hold_ms(path: Path) -> int:
    try:
        return max(0, int(_hold_spec(path).get("ms", 0)))
    except (TypeError, ValueError):
        return 0


def precommit_delay(control_dir: str, where: dict, log) -> int:
    """Pre-commit window hook, run by a sink task after ``flush()`` and before the commit.

    Sleeps ``<control>/precommit-delay-ms`` ms if that file exists. If ``precommit-hold-ms`` exists, the
    first task to claim it (an atomic rename) holds its open transaction that long instead — long enough,
    when the nemesis asks, to outlive ``transaction.timeout.ms``, or to be killed while it holds it
    (``kill-executor``, which names the sink partition that may claim it) — or until the nemesis releases
    it (:func:`release_holds` deletes the claimed file). ``log(**fields)`` records a hold.
    Returns the milliseconds of the hold asked for (or of the delay slept).
    """
    if not control_dir:
        return 0
    d = Path(control_dir)
    claimed = d / f"{PRECOMMIT_HOLD}.claimed-{os.getpid()}-{time.time_ns()}"
    try:
        want = _hold_partition(d / PRECOMMIT_HOLD)
        if want is None or want == where.get("partition"):
            os.rename(d / PRECOMMIT_HOLD, claimed)
            hold = _hold_ms(claimed)
            log(hold_ms=hold, **where)
            deadline = time.monotonic() + hold / 1000
            while claimed.exists() and (left := deadline - time.monotonic()) > 0:
                time.sleep(min(0.05, left))
            claimed.unlink(missing_ok=True)
            return hold
    except FileNotFoundError:
        pass
    ms = _read_ms(d / PRECOMMIT_DELAY)
    if ms:
        time.sleep(ms / 1000)
    return ms


def zombie_point(control_dir: str, stage: str, where: dict, rows, log, max_wait_s: float = 120.0):
    """Zombie hook (``nemesis/zombie.py``), run by a sink task at ``stage``: ``preinit`` (before
    ``init_transactions()``) or ``precommit`` (after ``flush()``, before the commit).

    When ``<control>/zombie.<stage>`` (JSON ``{"partition": P}``) exists and this task writes sink
    partition P, the task claims it (an atomic rename) and becomes a zombie: it reads all of ``rows``
    into memory (they come from its executor, which is about to die), stops answering SIGHUP and SIGTERM
    (PySpark's daemon SIGHUPs its workers when their executor dies), records its pid in
    ``zombie.pids``, logs (``log(stage=, **where)``: a ``zombie`` event) and waits until
    ``zombie.release`` exists (≤ ``max_wait_s`` s, so it never outlives the run for long; the fault's
    heal also SIGKILLs it). Then, its signal dispositions restored, it goes on with the rest of the task's
    protocol: a real task attempt
    that Spark has given up on, still talking to Kafka — what a task on an executor cut off from the
    driver (a GC pause, a partition) does. Returns ``rows`` (a list when the task turned zombie).
    """
    if not control_dir:
        return rows

    d = Path(control_dir)
    spec = d / ZOMBIE.format(stage=stage)
    try:
        want = json.loads(spec.read_text() or "{}").get("partition")
    except (FileNotFoundError, ValueError):
        return rows
    if want is not None and int(want) != where.get("partition"):
        return rows
    try:
        os.rename(spec, d / f"{spec.name}.claimed-{os.getpid()}-{time.time_ns()}")
    except FileNotFoundError:
        return rows  # another task claimed it
    if rows is not None:
        rows = list(rows)
    before = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGHUP, signal.SIGTERM)}
    with open(d / ZOMBIE_PIDS, "a") as f:
        f.write(f"{os.getpid()}\n")
    log(stage=stage, zombie_pid=os.getpid(), **where)
    deadline = time.monotonic() + max_wait_s
    while not (d / ZOMBIE_RELEASE).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    log(stage=f"{stage}-released", zombie_pid=os.getpid(), **where)
    for sig, handler in before.items():  # an ordinary worker again: its executor's end ends it
        signal.signal(sig, handler)
    return rows


def driver_overrides(control_dir: str | os.PathLike | None) -> dict:
    """The Kafka source options the next driver start must use instead of its command line's
    (``<control>/driver-overrides.json``, written by the ``upgrade`` fault): ``{"min_partitions": int,
    "max_offsets": int}``, each optional. ``{}`` when there is none or it is not a JSON object."""
    if not control_dir:
        return {}
    return read_control(control_dir, DRIVER_OVERRIDES) or {}
