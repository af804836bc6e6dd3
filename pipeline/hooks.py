"""Fault-injection hooks inside the pipeline, switched at run time through a control directory.

The nemesis never restarts the job to change a hook: it creates or removes small files in
``<run>/control/`` and the driver looks at them at fixed points of each micro-batch.

Commit window (DESIGN §2): Spark's driver writes ``offsets/N`` before running batch N and ``commits/N``
after the sink returned. Inside ``foreachBatch`` the sink has committed (eos: every partition's Kafka
transaction is committed) when our function returns, and Spark has not written ``commits/N`` yet. When
``kill-in-commit-window.armed`` exists, the driver writes ``kill-in-commit-window.open`` (atomically,
``{"batch": N, "pid": ...}``), removes the armed file, and holds the batch for up to ``hold_s`` seconds so the nemesis can
SIGKILL it there. If nobody kills it, it writes ``.missed`` and carries on, and the nemesis reports the
fault as not taken.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

ARMED = "kill-in-commit-window.armed"
OPEN = "kill-in-commit-window.open"
MISSED = "kill-in-commit-window.missed"
PRECOMMIT_DELAY = "precommit-delay-ms"   # every sink task sleeps this long between flush and commit
PRECOMMIT_HOLD = "precommit-hold-ms"     # the first sink task to claim it holds its transaction this long
NOTIFY_DELAY = "commit-notify-delay-ms"  # the driver sleeps this long between sink commit and commit log
NOTIFY_LOG = "commit-notify.jsonl"
READY = "driver.ready"
APPS = "driver.apps.jsonl"


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

    def _write(self, name: str, obj: dict) -> None:
        tmp = self.path / (name + ".tmp")
        tmp.write_text(json.dumps(obj))
        os.replace(tmp, self.path / name)


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
    (``kill-executor``, which names the sink partition that may claim it). ``log(**fields)`` records a hold.
    Returns the milliseconds slept.
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
            time.sleep(hold / 1000)
            return hold
    except FileNotFoundError:
        pass
    ms = _read_ms(d / PRECOMMIT_DELAY)
    if ms:
        time.sleep(ms / 1000)
    return ms
