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
READY = "driver.ready"
APPS = "driver.apps.jsonl"


class ControlDir:
    """The driver's view of ``<run>/control``. ``path=None`` disables every hook."""

    def __init__(self, path: str | os.PathLike | None, hold_s: float = 60.0):
        self.path = Path(path) if path else None
        self.hold_s = hold_s

    def mark_ready(self, info: dict) -> None:
        """Tell the harness the query is started (pid, query id); overwrites the previous driver's file."""
        if self.path is None:
            return
        self._write(READY, {"pid": os.getpid(), "time": time.time(), **info})
        with open(self.path / APPS, "a") as f:  # every incarnation's Spark application id
            f.write(json.dumps({"pid": os.getpid(), "time": time.time(), **info}) + "\n")

    def after_sink_commit(self, batch_id: int) -> None:
        """Run between the sink's commit of batch ``batch_id`` and Spark's ``commits/<batch_id>``.

        Blocks up to ``hold_s`` seconds when the commit-window kill is armed; returns at once otherwise.
        """
        if self.path is None:
            return
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
