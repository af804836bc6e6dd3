"""Executes a fault schedule in a background thread and records every op in ``nemesis.jsonl``.

Ops: ``{"type": "invoke", "f": <fault>}`` then ``{"type": "info", "f": <fault>, "outcome": ...,
"target": ..., "evidence": {...}}`` (Jepsen records nemesis completions as ``info``). The first fault
waits until the pipeline has committed its first batch, so no fault hits a pipeline still starting.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Callable

from harness.history import HistoryWriter
from nemesis.fault import Fault, NemesisContext

log = logging.getLogger("onceproof.nemesis")


class NemesisRunner:
    """Runs ``schedule`` (``[(at_s, name)]``) against ``faults`` until done or :meth:`stop`."""

    def __init__(self, faults: dict[str, Fault], schedule: list[tuple[float, str]], ctx: NemesisContext,
                 history: HistoryWriter, seed: int, on_op: Callable[[dict], None] | None = None):
        self.faults, self.schedule, self.ctx, self.history = faults, schedule, ctx, history
        self.rng = random.Random(f"targets-{seed}")
        self.on_op = on_op or (lambda op: None)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.ops: list[dict] = []

    def start(self, ready: Callable[[], bool]) -> None:
        """Start once ``ready()`` (polled every 0.5 s) says the pipeline is up."""
        self._thread = threading.Thread(target=self._run, args=(ready,), name="nemesis", daemon=True)
        self._thread.start()

    def _run(self, ready: Callable[[], bool]) -> None:
        while not ready():
            if self._stop.wait(0.5):
                return
        t0 = time.monotonic()
        for at_s, name in self.schedule:
            if self._stop.wait(max(0.0, t0 + at_s - time.monotonic())):
                return
            fault = self.faults[name]
            self.history.append({"process": "nemesis", "type": "invoke", "f": name, "planned_s": at_s})
            try:
                out = fault.invoke(self.ctx, self.rng)
                outcome = out.outcome
                if self.ctx.stop.is_set() and outcome != "effective":
                    outcome = "skipped"  # cut short by the end of the run: not a fault that failed
                    out.evidence.setdefault("reason", "interrupted by the end of the run")
                op = {"process": "nemesis", "type": "info", "f": name, "outcome": outcome,
                      "target": out.target, "evidence": out.evidence}
            except Exception as e:  # noqa: BLE001 - a nemesis bug must not kill the run; record it
                log.exception("fault %s crashed", name)
                op = {"process": "nemesis", "type": "info", "f": name, "outcome": "error",
                      "target": "", "evidence": {"error": repr(e)}}
            op = self.history.append(op)
            self.ops.append(op)
            self.on_op(op)

    def stop_and_heal(self) -> list[str]:
        """Stop injecting, wait for an in-flight fault (≤ 120 s), then heal every fault. Returns errors."""
        self._stop.set()
        self.ctx.stop.set()
        if self._thread is not None:
            self._thread.join(timeout=120)
        errors = []
        for name, f in self.faults.items():
            try:
                f.heal(self.ctx)
                self.history.append({"process": "nemesis", "type": "info", "f": "heal", "fault": name})
            except Exception as e:  # noqa: BLE001 - keep healing the others
                errors.append(f"{name}: {e!r}")
        return errors
